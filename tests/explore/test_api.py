"""The live explorer's server and session without a browser: FastAPI's TestClient against tiny models.

Map values equal attnsim's own capture of the same text; a head switched off changes the next-token
distribution and the class probabilities exactly as a direct ablation through the interventions' hooks does;
bad input (empty, too long, a head out of range, a bad ablation, an unknown or foreign run) is a 400 naming
the fix, and the server answers the next request; two clients at once each get their own text's answer.
"""

from __future__ import annotations

import base64
import threading
import time

import numpy as np
import pytest
import torch

from attnsim.explore.server import create_app
from attnsim.explore.session import Explorer
from tests.helpers.tiny_models import save_tiny

TEXT = "The river rose in the night. The river rose again, and the farmers met at the station."


def maps_of(payload: dict, name: str, where: dict = None) -> np.ndarray:
    where = where or payload["maps"]
    n = payload["n_tokens"]
    return np.frombuffer(base64.b64decode(where[name]), dtype="<f4").reshape(n, n)


@pytest.fixture(scope="module")
def bert(tiny_bert):
    return Explorer.load([f"model.path={tiny_bert}", "corpus.seq_len=48"])


@pytest.fixture(scope="module")
def client(bert):
    from fastapi.testclient import TestClient

    return TestClient(create_app(bert, text="hello"))


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return Explorer.load([f"model.path={save_tiny(tmp_path_factory.mktemp('gpt2'), 'gpt2')}", "corpus.seq_len=64"])


def rss() -> int:
    """This process's resident memory (bytes), from /proc."""
    import os

    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def direct_capture(explorer: Explorer, text: str):
    """Attention and Z of ``text`` through attnsim's capture, on a model loaded apart from the explorer's."""
    from attnsim.capture.hooks import forward_with_capture
    from attnsim.capture.load import load_model

    window = explorer.window(text)
    model, _ = load_model(explorer.info, needs_attention=True)
    inputs = {"input_ids": window.batch["input_ids"], "attention_mask": window.batch["attention_mask"]}
    with torch.inference_mode():
        _, capture = forward_with_capture(model, explorer.info.arch, explorer.info.n_heads, inputs, attention=True)
    return window, capture


def test_page_is_self_contained(client):
    page = client.get("/").text
    assert "AttnsimExplore.mount" in page and "ax-grid" in page  # the one front end, inlined
    assert "http://" not in page and "https://" not in page and "src=" not in page


def test_maps_equal_attnsim_capture(client, bert):
    from attnsim.stats import context_similarity
    from attnsim.stats.rollout import attention_rollout

    reply = client.post("/api/analyse", json={"text": TEXT, "layer": 1, "head": 2})
    assert reply.status_code == 200, reply.text
    data = reply.json()
    window, capture = direct_capture(bert, TEXT)
    assert data["tokens"] == window.labels and data["n_tokens"] == window.batch["input_ids"].shape[1]
    attention = capture.attention_layers[1][0, 2].numpy()
    assert np.abs(maps_of(data, "attention") - attention).max() <= 1e-6
    csm = context_similarity(capture.z_layers[1][0, 2], "none").numpy()
    assert np.abs(maps_of(data, "csm") - csm).max() <= 1e-6 * max(1.0, np.abs(csm).max())
    rollout = attention_rollout(torch.stack(capture.attention_layers), window.batch["attention_mask"].bool())[1, 0].numpy()
    assert np.abs(maps_of(data, "rollout") - rollout).max() <= 1e-6
    # thumbnails: one byte a cell, every head, at most 24 cells a side
    thumbs = data["thumbs"]
    assert len(base64.b64decode(thumbs["codes"])) == 2 * 4 * thumbs["cells"] ** 2 and thumbs["cells"] <= 24
    assert "all_maps" not in data  # the server sends one head's full maps only


def test_numbers_come_from_the_stats(client):
    repeated = client.post("/api/analyse", json={"text": "alpha beta gamma delta alpha beta gamma delta", "layer": 0, "head": 0}).json()
    once = client.post("/api/analyse", json={"text": "alpha beta gamma delta", "layer": 0, "head": 0}).json()
    numbers = repeated["numbers"]
    for name in ("attention_entropy", "attention_cls", "local_mass", "prev_token_score", "induction_score"):
        assert len(numbers[name]) == 2 and len(numbers[name][0]) == 4, name
    assert all(v is not None for row in numbers["induction_score"] for v in row)  # the text repeats
    assert all(v is None for row in once["numbers"]["induction_score"] for v in row)  # nothing repeats: no induction query
    assert all(0 <= v <= 1 for row in numbers["local_mass"] for v in row)


@pytest.mark.parametrize(
    "body, status, words",
    [
        ({"text": "", "layer": 0, "head": 0}, 400, "empty"),
        ({"text": "   \n", "layer": 0, "head": 0}, 400, "empty"),
        ({"text": "hello", "layer": 2, "head": 0}, 400, "layer 0..1"),
        ({"text": "hello", "layer": 0, "head": -1}, 400, "head 0..3"),
        ({"text": "hello", "layer": 0, "head": 0, "off": [[0, 9]]}, 400, "does not exist"),
        ({"text": "hello", "layer": 0, "head": 0, "off": [[0]]}, 400, "[layer, head]"),
        ({"text": "hello", "layer": 0, "head": 0, "off": [[0, 1]], "mode": "resample"}, 400, "zero or mean"),
        ({"text": "hello", "layer": 0, "head": 0, "off": "1.2"}, 400, "off: "),  # wrong types: 400 with the field, not FastAPI's 422
        ({"text": 5, "layer": 0, "head": 0}, 400, "text: "),
        ({"text": "hello", "layer": "x", "head": 0}, 400, "layer: "),
        ({"text": "hello", "layer": 0, "head": 0, "page": "p" * 65, "seq": 1}, 400, "page: String should have at most 64 characters"),
    ],
)
def test_bad_input_is_a_message_and_the_server_keeps_running(client, body, status, words):
    reply = client.post("/api/analyse", json=body)
    assert reply.status_code == status and words in reply.json()["error"], reply.text
    assert client.post("/api/analyse", json={"text": "still here", "layer": 0, "head": 0}).status_code == 200


@pytest.mark.parametrize(
    "body, words",
    [
        (b"not json", "The request body is not valid JSON (it breaks at character 0)"),
        (b'{"text": "a",', "The request body is not valid JSON (it breaks at character 13)"),
        (b'{"text": "caf\xe9 \xff ok", "layer": 0, "head": 0}', "The request body could not be read (There was an error parsing the body). Send UTF-8"),
        (b'{"text": "\\ud800 abc", "layer": 0, "head": 0}', "not Unicode text (U+D800 at character 0, half of a surrogate pair)"),
    ],
)
def test_a_body_that_is_not_json_or_not_text_is_a_message(client, body, words):
    reply = client.post("/api/analyse", content=body, headers={"content-type": "application/json"})
    assert reply.status_code == 400 and words in reply.json()["error"], reply.text
    assert client.post("/api/analyse", json={"text": "still here", "layer": 0, "head": 0}).status_code == 200


def test_the_notebook_path_refuses_a_text_that_is_no_string_and_malformed_heads(bert):
    from attnsim.explore.session import ExploreError

    with pytest.raises(ExploreError, match="The text must be a string, got int"):
        bert.analyse(5, 0, 0, [])
    for off in ([(1,)], "1,2", [(0, 1.5)], [(True, 0)]):
        with pytest.raises(ExploreError, match=r"The heads switched off are a list of \[layer, head\] pairs of whole numbers"):
            bert.analyse("hello", 0, 0, off)
    from attnsim.explore.session import _head_pairs

    assert _head_pairs([(1, 1), [1, 1], (0, 2), (1.0, 3)]) == [(0, 2), (1, 1), (1, 3)]  # distinct, sorted, whole numbers as int


def test_a_long_text_says_what_was_cut(client):
    data = client.post("/api/analyse", json={"text": " ".join(["word"] * 100), "layer": 0, "head": 0}).json()
    assert data["n_tokens"] == 48 and data["text_tokens"] == 100 and data["cut"] == 100 - 46  # [CLS] + 46 + [SEP]
    assert data["cut_at"] == 46 and data["chars_cut"] == 0 and data["chars"] == 499
    short = client.post("/api/analyse", json={"text": "a short text", "layer": 0, "head": 0}).json()
    assert short["cut"] == 0 and short["cut_at"] is None and short["chars_cut"] == 0


def test_a_body_over_the_limit_is_413_naming_it_and_the_server_keeps_running(client, bert):
    from attnsim.explore.server import body_limit

    limit = body_limit(bert.max_chars)
    assert limit == 48 * 64 * 12 + 64 * 1024  # seq_len 48: 3,072 characters at 12 JSON bytes each, and 64 KiB for the rest
    body = b'{"text": "' + b"word " * (50 * 1024 * 1024 // 5) + b'"}'  # 50 MB
    before, peak, done = rss(), [0], threading.Event()

    def watch():  # the most memory the process holds while the request is answered
        while not done.is_set():
            peak[0] = max(peak[0], rss())
            done.wait(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        reply = client.post("/api/analyse", content=body, headers={"content-type": "application/json"})
    finally:
        done.set()
        watcher.join()
    assert max(peak[0], rss()) - before < 100 * 1024 * 1024  # read in full and parsed, it grew by 300 MB
    assert reply.status_code == 413 and f"({limit:,} bytes at most)" in reply.json()["error"], reply.text
    assert "at most 48 tokens, from a text's first 3,072 characters" in reply.json()["error"]
    assert reply.headers["connection"] == "close"
    del body
    assert client.post("/api/analyse", json={"text": "still here", "layer": 0, "head": 0}).status_code == 200


def test_the_body_limit_stops_reading_at_the_limit():
    from attnsim.explore.server import BodyLimit

    mib = b"x" * (1 << 20)

    def fifty_mib():
        for _ in range(50):
            yield mib

    called = []

    async def app(scope, receive, send):
        message = await receive()
        called.append(len(message["body"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})

    import asyncio

    def run(headers, chunks):
        pulled, sent = [0], []

        async def receive():
            pulled[0] += 1
            chunk = next(chunks, None)
            return {"type": "http.request", "body": chunk or b"", "more_body": chunk is not None}

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/api/analyse", "headers": headers}
        asyncio.run(BodyLimit(app, 3 << 20)(scope, receive, send))
        return sent[0]["status"], pulled[0]

    # a declared Content-Length over the limit: refused before one byte of the body is read
    assert run([(b"content-length", str(50 << 20).encode())], fifty_mib()) == (413, 0) and not called
    # chunked (no length): read up to the limit (3 MiB), refused at the fourth MiB, the other 46 never pulled
    assert run([(b"transfer-encoding", b"chunked")], fifty_mib()) == (413, 4) and not called
    # within the limit: the app gets the whole body, as one message
    assert run([], iter([mib, mib])) == (200, 3) and called == [2 << 20]


def test_a_long_text_is_cut_to_the_character_budget_before_tokenising(client, bert, monkeypatch):
    seen = []
    tokenizer = bert.tokenizer

    class Recorder:
        def __getattr__(self, name):
            return getattr(tokenizer, name)

        def __call__(self, text, *args, **kwargs):
            seen.append(len(text))
            return tokenizer(text, *args, **kwargs)

    monkeypatch.setattr(bert, "tokenizer", Recorder())
    words = " ".join(["river", "council", "station"] * 120_000)  # 2.1 MB of words
    data = bert.analyse(words, 0, 0)  # the notebook path (no body limit): the text is cut all the same
    assert bert.max_chars == 48 * 64 and seen and max(seen) == bert.max_chars
    assert data["n_tokens"] == 48 and data["cut_at"] == 46 and data["chars"] == len(words) and data["chars_cut"] == len(words) - 48 * 64
    assert data["text_tokens"] > 46 and data["cut"] == data["text_tokens"] - 46
    seen.clear()
    # through the server: a text longer than the budget but within the body limit is answered with the cut said
    reply = client.post("/api/analyse", json={"text": words[:100_000], "layer": 0, "head": 0})
    assert reply.status_code == 200, reply.text
    assert reply.json()["cut_at"] == 46 and reply.json()["chars_cut"] == 100_000 - 48 * 64 and max(seen) == bert.max_chars


def test_unknown_run_is_refused_on_the_page(client, tracking_uri):
    reply = client.get("/api/context", params={"run": "0123456789abcdef"})
    assert reply.status_code == 400 and "is not in the tracking store" in reply.json()["error"]
    assert client.get("/api/context", params={"run": ""}).json() == {"context": None}


def test_two_clients_at_once_get_their_own_text(client):
    texts = [f"Text number {i} talks about {word}." for i, word in enumerate(["rivers", "councils", "stations", "farmers", "rain", "cattle"])]
    alone = {t: client.post("/api/analyse", json={"text": t, "layer": 1, "head": 1}).json() for t in texts}
    results = {}

    def ask(t):
        results[t] = client.post("/api/analyse", json={"text": t, "layer": 1, "head": 1}).json()

    threads = [threading.Thread(target=ask, args=(t,)) for t in texts * 2]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for t in texts:
        assert results[t]["tokens"] == alone[t]["tokens"]
        assert results[t]["maps"]["attention"] == alone[t]["maps"]["attention"]


def test_requests_superseded_by_a_newer_one_of_the_same_page_are_not_computed(bert, monkeypatch):
    from fastapi.testclient import TestClient

    app = create_app(bert)
    client = TestClient(app)
    forward, passes = bert.forward, []

    def counted(window, *args, **kwargs):
        passes.append(window.batch["input_ids"].shape[1])
        return forward(window, *args, **kwargs)

    monkeypatch.setattr(bert, "forward", counted)
    results = {}

    def ask(page, seq, words):
        body = {"text": f"Request {seq} of page {page} says " + " ".join(["word"] * words), "layer": 0, "head": 0, "page": page, "seq": seq}
        results[page, seq] = client.post("/api/analyse", json=body)

    threads = [threading.Thread(target=ask, args=("a", seq, seq)) for seq in range(1, 6)]
    threads.append(threading.Thread(target=ask, args=("b", 1, 9)))  # another page's request is its own
    with bert.lock:  # the model busy: every request arrives and waits
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 60
        while app.state.newest.newer("a", 4) != 5 or app.state.newest.newer("b", 0) != 1:
            assert time.monotonic() < deadline, "the requests did not arrive"
            time.sleep(0.01)
    for thread in threads:
        thread.join()
    for seq in range(1, 5):
        reply = results["a", seq]
        assert reply.status_code == 409 and reply.json()["superseded"] is True, reply.text
        assert f"Request {seq} of this page was superseded by its request 5" in reply.json()["error"]
    assert results["a", 5].status_code == 200 and results["b", 1].status_code == 200
    assert sorted(passes) == sorted([results["a", 5].json()["n_tokens"], results["b", 1].json()["n_tokens"]])  # two passes, no more
    # a request without a page id is never superseded
    assert client.post("/api/analyse", json={"text": "no page at all", "layer": 0, "head": 0}).status_code == 200


def test_a_client_gone_before_the_forward_pass_stops_its_work(bert, monkeypatch):
    import asyncio
    import json

    monkeypatch.setattr(bert, "forward", lambda *a, **k: pytest.fail("a forward pass for a client that went away"))
    app = create_app(bert)
    body = json.dumps({"text": "nobody waits for this answer", "layer": 0, "head": 0}).encode()
    messages = [{"type": "http.request", "body": body, "more_body": False}, {"type": "http.disconnect"}]
    sent = []

    async def receive():
        return messages.pop(0) if len(messages) > 1 else messages[0]

    async def send(message):
        sent.append(message)

    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    scope = {"type": "http", "method": "POST", "path": "/api/analyse", "headers": headers, "query_string": b"", "root_path": "", "scheme": "http"}
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 409 and b"The client disconnected before the forward pass" in sent[1]["body"]


def test_switching_a_head_off_equals_a_direct_ablation(gpt2):
    from attnsim.capture.interventions import ablation_values, load_task_model, replace_heads

    text = "the council met the farmers at the station on monday"
    data = gpt2.analyse(text, 1, 0, off=[(0, 1), (1, 3)], mode="zero")
    assert gpt2.kind == "causal_lm"
    ablated = data["ablation"]["predictions"]
    model, _, _ = load_task_model(gpt2.info, attn_implementation="eager")
    window = gpt2.window(text)
    inputs = {"input_ids": window.batch["input_ids"], "attention_mask": window.batch["attention_mask"]}
    with torch.inference_mode():
        clean = torch.softmax(model(**inputs).logits[0], -1)
        with replace_heads(model, gpt2.info.arch, gpt2.info.n_heads, ablation_values([(0, 1), (1, 3)], "zero")):
            direct = torch.softmax(model(**inputs).logits[0], -1)
    top = direct.topk(5, -1)
    assert ablated["ids"] == top.indices.tolist()
    assert np.abs(np.array(ablated["p"]) - top.values.numpy()).max() <= 1e-6
    assert np.abs(np.array(ablated["clean"]) - clean.gather(-1, top.indices).numpy()).max() <= 1e-6  # beside the unablated values
    assert np.abs(np.array(data["predictions"]["p"]) - clean.topk(5, -1).values.numpy()).max() <= 1e-6
    assert not np.allclose(ablated["p"], data["predictions"]["p"])  # it changed something
    # a later layer's map changes with an earlier head off; an earlier layer's does not
    change = np.array(data["ablation"]["attention_change"])
    assert change[0].max() == 0 and change[1].max() > 0


def test_mean_ablation_uses_the_corpus_mean(gpt2):
    data = gpt2.analyse("the farmers met at the station", 1, 0, off=[(0, 0)], mode="mean")
    zero = gpt2.analyse("the farmers met at the station", 1, 0, off=[(0, 0)], mode="zero")
    mean = gpt2.mean_z(4)
    assert mean.shape == (2, 4, 4, 8) and data["ablation"]["mode"] == "mean"
    assert data["ablation"]["predictions"]["p"] != zero["ablation"]["predictions"]["p"]


def test_classifier_logits_beside_the_clean_ones(tmp_path, tiny_bert):
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from attnsim.capture.interventions import ablation_values, replace_heads

    torch.manual_seed(0)
    config = BertConfig.from_pretrained(
        tiny_bert, num_labels=3, id2label={0: "sport", 1: "tech", 2: "politics"}, label2id={"sport": 0, "tech": 1, "politics": 2}
    )
    BertForSequenceClassification(config).save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(tmp_path)
    explorer = Explorer.load([f"model.path={tmp_path}", "corpus.seq_len=32"])
    assert explorer.kind == "classifier" and explorer.describe()["classes"] == ["sport", "tech", "politics"]
    data = explorer.analyse("The match ended in a draw.", 1, 0, off=[(0, 2)])
    window = explorer.window("The match ended in a draw.")
    inputs = {"input_ids": window.batch["input_ids"], "attention_mask": window.batch["attention_mask"]}
    with torch.inference_mode(), replace_heads(explorer.model, explorer.info.arch, 4, ablation_values([(0, 2)], "zero")):
        direct = torch.softmax(explorer.model(**inputs).logits[0], -1)
    assert np.abs(np.array(data["ablation"]["classes"]["p"]) - direct.numpy()).max() <= 1e-6
    assert data["ablation"]["classes"]["clean"] == data["classes"]["p"]


def test_corpus_context_of_a_run_and_a_foreign_run_refused(tiny_bert, bert, gpt2, tracking_uri, text_dir):
    from attnsim.explore.context import RunRefused, corpus_context
    from attnsim.workflows.run import run

    result = run(
        "attention_maps",
        [
            f"model.path={tiny_bert}",
            "corpus=text",
            f"corpus.path={text_dir}",
            "corpus.seq_len=24",
            "corpus.limit=2",
            "trainer.progress_bar=false",
            "plots.examples=0",
        ],
    )
    context = corpus_context(result.run_id, bert.info, tracking_uri)
    assert context["run_id"] == result.run_id and context["stats"]
    grid = context["values"]["attention_maps/previous_mass"]
    assert len(grid) == 2 and len(grid[0]) == 4 and all(isinstance(v, float) for row in grid for v in row)
    with pytest.raises(RunRefused, match=rf"but the explorer has .* loaded.*start attnsim explore with that run's model \(model\.path={tiny_bert}\)"):
        corpus_context(result.run_id, gpt2.info, tracking_uri)


def test_a_refused_start_up_run_is_said_on_the_page(bert):
    from fastapi.testclient import TestClient

    page = TestClient(create_app(bert, context_error="Run 'abc' measured another model.")).get("/").text
    assert "Run 'abc' measured another model." in page
