"""Streaming: the same tokens as the prepared path, disjoint ranks, and a position that survives a checkpoint."""

import re
from itertools import islice

import lightning as L
import numpy as np
import torch
from helpers import compose_config, write_corpus

from gptlab.apps.train import train
from gptlab.data.prepare import load_prepared, prepare
from gptlab.data.sources import HFDataset, TextFiles
from gptlab.data.streaming import StreamingWindows
from gptlab.data.tokenizers import ByteTokenizer

BLOCK = 64


def stream_tokens(windows) -> np.ndarray:
    """Windows overlap by one token (stride block_size): undo that to get the token stream back."""
    parts = [x.numpy() for x, _, _ in windows]
    return np.concatenate(parts + [windows[-1][1][-1:].numpy()])


def test_streamed_jsonl_equals_prepared_tokens(corpus, tmp_path, gpt2):
    prepare(TextFiles([str(p) for p in corpus]), gpt2, tmp_path / "c", val_fraction=0.1, progress=False)
    prepared = load_prepared(tmp_path / "c", gpt2)["train"]
    n = (len(prepared) - 1) // BLOCK
    for source in (HFDataset("json", data_files=[str(p) for p in corpus]), TextFiles([str(p) for p in corpus])):
        windows = list(islice(StreamingWindows(source, gpt2, BLOCK, 0.1), n))
        assert all(torch.equal(x[1:], y[:-1]) for x, y, _ in windows)
        np.testing.assert_array_equal(stream_tokens(windows), prepared[0 : n * BLOCK + 1])


def _doc_ids(windows) -> set[str]:
    return set(re.findall(r"doc (\d+-\d+):", ByteTokenizer().decode(stream_tokens(windows).tolist())))


def test_two_ranks_stream_disjoint_documents(corpus):
    source = HFDataset("json", data_files=[str(p) for p in corpus])
    per_rank = []
    for rank in (0, 1):
        stream = StreamingWindows(source, ByteTokenizer(), BLOCK, 0.1, rank=rank, world_size=2)
        first_pass = []
        for w in stream:
            if int(w[2][1]) > 0:  # the position has moved into the second pass
                break
            first_pass.append(w)
        per_rank.append(_doc_ids(first_pass))
    everything = _doc_ids(list(islice(StreamingWindows(source, ByteTokenizer(), BLOCK, 0.1), 10_000)))
    assert per_rank[0] and per_rank[1] and not per_rank[0] & per_rank[1]
    assert len(per_rank[0] | per_rank[1]) >= len(everything) - 2  # a pass's last partial window is dropped


def test_resuming_from_a_position_continues_the_stream(tmp_path):
    source = TextFiles([str(p) for p in write_corpus(tmp_path, docs_per_file=20)])
    stream = StreamingWindows(source, ByteTokenizer(), BLOCK, 0.1)
    first = list(islice(stream, 400))  # more than two passes over the train documents
    assert int(first[-1][2][1]) >= 2
    for k in (0, 7, 150, 250, 370):
        worker, pass_, record, offset = (int(v) for v in first[k][2])
        resumed = StreamingWindows(source, ByteTokenizer(), BLOCK, 0.1, start={worker: (pass_, record, offset)})
        for a, b in zip(islice(resumed, 20), first[k + 1 : k + 21]):
            assert torch.equal(a[0], b[0]) and torch.equal(a[2], b[2])


class BatchRecorder(L.Callback):
    """Keeps every training batch's inputs (class-level, since Hydra builds the instance), so two runs can be
    compared batch by batch."""

    seen: list[torch.Tensor] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        BatchRecorder.seen.append(batch[0].clone())


def _run(tmp_path, corpus, name, steps, ckpt=None):
    overrides = [
        "data=text_files", f"data.source.paths=[{','.join(str(p) for p in corpus)}]", "data.store=streaming",
        "data.val_fraction=0.1", "data.batch_size=4", "data.val_windows=4", "model.block_size=32", "model.n_layer=1",
        "model.n_embd=32", "model.n_head=2", f"trainer.max_steps={steps}", "trainer.val_check_interval=3",
        "trainer.accelerator=cpu", "callbacks.progress_bar=null", "logger=[]", f"paths.output_dir={tmp_path / name}",
        "+callbacks.recorder._target_=test_streaming.BatchRecorder", "trainer.enable_model_summary=false",
    ]
    if ckpt:
        overrides.append(f"ckpt_path={ckpt}")
    cfg = compose_config(overrides)
    BatchRecorder.seen = []
    train(cfg)
    return BatchRecorder.seen


def test_resumed_training_continues_the_stream(corpus, tmp_path):
    straight = _run(tmp_path, corpus, "straight", 9)
    first = _run(tmp_path, corpus, "first", 6)
    ckpt = torch.load(tmp_path / "first" / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["GPTDataModule"]["stream"]["positions"][0][0][0] == 0  # worker 0, first pass
    resumed = _run(tmp_path, corpus, "resumed", 9, ckpt=tmp_path / "first" / "checkpoints" / "last.ckpt")
    assert len(straight) == 9 and len(first) == 6 and len(resumed) == 3
    for a, b in zip(first + resumed, straight):
        assert torch.equal(a, b)


def test_dataloader_workers_read_disjoint_files(corpus):
    source = TextFiles([str(p) for p in corpus])  # two files: one datasets shard each, one per worker
    loader = torch.utils.data.DataLoader(StreamingWindows(source, ByteTokenizer(), BLOCK, 0.1), batch_size=4,
                                         num_workers=2)
    by_worker: dict[int, list] = {0: [], 1: []}
    for x, y, position in islice(loader, 60):
        assert len(set(position[:, 0].tolist())) == 1  # a batch comes from one worker
        by_worker[int(position[0, 0])].extend(zip(x, y, position))
    files = [_doc_ids(by_worker[w]) for w in (0, 1)]
    assert {i.split("-")[0] for i in files[0]} == {"0"} and {i.split("-")[0] for i in files[1]} == {"1"}
