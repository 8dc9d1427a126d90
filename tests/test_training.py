"""The generative retriever's trainer on the CPU: tiny random Llama, SmolLM2's tokenizer, a real
cs768 slice graph. Base-model conversion, prompt/label layout, length grouping, learning, overfitting,
kill-and-resume, the CLI command and the GPU benchmark script's smoke mode."""

from __future__ import annotations

import copy
import json
import re

import numpy as np
import pytest
import torch
from conftest import REPO, cs768_path
from test_build import write_slice
from typer.testing import CliRunner

from graft.errors import ConfigError, GraftError
from graft.prompts import encode_prompt, prompt_for
from training import base_models
from training.base_models import load_tokenizer, resolve_base_model
from training.data import (
    IGNORE_INDEX,
    BatchPlan,
    Collator,
    EncodedPairs,
    encode_pairs,
    encode_pairs_table,
    epoch_seed,
    length_grouped_batches,
    padding_fraction,
    random_batches,
    read_docid_tokens,
    read_pairs,
)
from training.trainer import TrainConfig, fit

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="session")
def tokenizer():
    """SmolLM2's tokenizer; the first use converts the GGUF into the user cache (~20-50 s, once)."""
    return load_tokenizer("tiny")


@pytest.fixture(scope="session")
def index80(tmp_path_factory, encoder, tokenizer):
    """A built 80-paper cs768 slice with coverage-aware pairs for the SmolLM2 tokenizer."""
    from graphbuild.build import BuildConfig, build_index
    from training.pairs import DistillConfig, build_pairs

    tmp = tmp_path_factory.mktemp("train80")
    out = tmp / "index"
    # the graph (and so the pairs) of items with their title at w = 0.7 and facet similarity from the
    # embeddings alone, the build these tests' thresholds were set on: what they check is the trainer,
    # not how the edges were weighed
    build_index(write_slice(cs768_path(), 80, tmp), out,
                BuildConfig(item_context="title", title_weight=0.7, lexical_weight=0.0, text_lexical_weight=0.0),
                encoder=encoder)
    build_pairs(out, tokenizer, DistillConfig())
    return out


@pytest.fixture(scope="session")
def real_pairs(index80, tokenizer) -> EncodedPairs:
    table = read_pairs(index80 / "train" / "pairs.parquet")
    return encode_pairs_table(table, tokenizer, docid_tokens=read_docid_tokens(index80 / "docids" / "docids.parquet"))


def _tiny(seed: int = 0):
    model, _ = resolve_base_model("tiny", seed=seed)
    return model


def _hand_pairs(tokenizer, n: int = 24) -> EncodedPairs:
    rng = np.random.default_rng(0)
    words = ("graph neural network citation retrieval language model sparse dense contrastive learning "
             "distillation survey benchmark attention").split()
    facets = [("problem", "method", "result", "contribution")[i % 4] for i in range(n)]
    sources = [" ".join(rng.choice(words, 6)) for _ in range(n)]
    docids = [" ".join(rng.choice(words, 4)) for _ in range(n)]
    return encode_pairs(tokenizer, facets, sources, docids)


# ---- base models -----------------------------------------------------------------------------
@pytest.mark.slow
def test_smollm2_is_converted_once_and_reused(tokenizer, monkeypatch) -> None:
    """Slow the first time on a machine (GGUF de-quantisation, ~20-50 s); later runs reuse the cache."""
    folder = base_models.ensure_smollm2()
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    assert config["vocab_size"] == 49152 and (folder / "model.safetensors").is_file()
    assert json.loads((folder / "graft_conversion.json").read_text())["source"]["file"] == base_models.SMOLLM2_GGUF

    import time

    import transformers

    calls = []
    original = transformers.AutoModelForCausalLM.from_pretrained

    def spy(*args, **kwargs):
        calls.append(kwargs.get("gguf_file"))
        return original(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    t0 = time.perf_counter()
    model, tok = resolve_base_model("smollm2-135m")
    assert time.perf_counter() - t0 < 20  # ~0.5 s on an idle machine; no 20-50 s conversion
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert calls == [None]  # loaded from the converted folder, not from the GGUF
    assert tok.eos_token_id == 2 and tok.padding_side == "right"


def test_tiny_is_seeded_and_leaves_the_global_rng_alone(tokenizer) -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a, b = _tiny(0), _tiny(0)
    assert torch.equal(torch.rand(3), expected)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert a.config.vocab_size == len(tokenizer) == 49152 and a.config.num_hidden_layers == 2


def test_unknown_base_model_is_refused_with_the_fix(tmp_path) -> None:
    with pytest.raises(GraftError, match="never downloads models; pass a local folder"):
        load_tokenizer("meta-llama/Llama-3.2-1B-Instruct")
    (tmp_path / "empty").mkdir()
    with pytest.raises(GraftError, match="has no config.json"):
        resolve_base_model(str(tmp_path / "empty"))
    (tmp_path / "afile").write_text("x")
    with pytest.raises(GraftError, match="afile' is a file, not a model folder"):
        load_tokenizer(str(tmp_path / "afile"))


@pytest.mark.slow
def test_a_base_model_folder_without_usable_weights_is_refused_and_other_weights_are_another_model(
        tokenizer, tmp_path) -> None:
    """A folder with config.json but no weights is refused before any work (`graft train` checks it
    before it writes pairs), damaged weights with a message instead of the loader's traceback, and
    new weights at the same path make another base model (so a trained index is not kept as is)."""
    from training.base_models import check_base_model, describe_base_model

    folder = tmp_path / "base"
    _tiny().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    before = describe_base_model(str(folder))
    weights = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").unlink()
    for check in (check_base_model, resolve_base_model):
        with pytest.raises(GraftError, match="has no weights"):
            check(str(folder))
    load_tokenizer(str(folder))  # a tokenizer alone needs no weights
    tokenizer_file = (folder / "tokenizer.json").read_bytes()
    (folder / "tokenizer.json").unlink()  # before, the tokenizer's loader blamed a missing sentencepiece
    for check in (check_base_model, load_tokenizer):
        with pytest.raises(GraftError, match="has no weights" if check is check_base_model else "has no tokenizer"):
            check(str(folder))
    (folder / "tokenizer.json").write_bytes(tokenizer_file)
    (folder / "model.safetensors").write_bytes(weights[:1000])
    with pytest.raises(GraftError, match="its weights cannot be loaded"):
        resolve_base_model(str(folder))
    _tiny(seed=1).save_pretrained(folder)
    assert describe_base_model(str(folder))["files"] != before["files"]
    assert describe_base_model(str(folder))["path"] == before["path"]


@pytest.mark.slow
def test_training_that_diverges_saves_no_model(tokenizer, tmp_path) -> None:
    """A loss of nan or inf means the weights are lost: no model is saved as finished."""
    from training.trainer import TrainingDiverged

    for name, bad in (("lr", float("inf")), ("epochs", float("inf")), ("lr", float("nan"))):
        with pytest.raises(ValueError, match=rf"{name}={bad} \(a finite number\)"):
            TrainConfig(**{name: bad})
    config = TrainConfig(max_steps=3, batch_size=4, lr=1e30, logging_steps=1, save_every_steps=1)
    with pytest.raises(TrainingDiverged, match="training diverged: the loss was nan at step .* lower --lr"):
        fit(_tiny(), tokenizer, _hand_pairs(tokenizer, 12), tmp_path / "model", config, quiet=True)
    assert not (tmp_path / "model" / "training_config.json").exists()
    assert not (tmp_path / "model" / "checkpoints").exists()
    # it stops at the first logged loss that is not finite, not after every step of lost weights
    seen: list[int] = []
    long = TrainConfig(max_steps=40, batch_size=4, lr=1e30, logging_steps=1, save_every_steps=0)
    with pytest.raises(TrainingDiverged, match=r"at step (\d+) of 40") as caught:
        fit(_tiny(), tokenizer, _hand_pairs(tokenizer, 12), None, long, quiet=True,
            on_step=lambda step, info: seen.append(step))
    stopped = int(re.search(r"at step (\d+) of 40", str(caught.value)).group(1))
    assert seen and max(seen) < stopped + 1 < 40


def test_training_never_runs_cudnn_attention(tokenizer) -> None:
    """The trainer's forward and backward run with cuDNN's attention kernel switched off (its backward
    gives NaN gradients on padded batches under torch 2.11 on Hopper GPUs), and the switch is undone
    afterwards."""
    from graft.devices import attention_kernels

    seen: list[tuple[bool, bool]] = []
    model = _tiny()
    model.register_forward_pre_hook(lambda *_: seen.append(
        (torch.backends.cuda.cudnn_sdp_enabled(), torch.backends.cuda.math_sdp_enabled())))
    before = torch.backends.cuda.cudnn_sdp_enabled()
    fit(model, tokenizer, _hand_pairs(tokenizer, 8), None, TrainConfig(max_steps=2, batch_size=4), quiet=True)
    assert seen == [(False, True)] * 2
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
    with attention_kernels():
        assert not torch.backends.cuda.cudnn_sdp_enabled() and torch.backends.cuda.flash_sdp_enabled()


# ---- prompts, labels, batches -------------------------------------------------------------------
def test_labels_mask_the_prompt_and_targets_end_in_eos(real_pairs, index80, tokenizer) -> None:
    table = read_pairs(index80 / "train" / "pairs.parquet").to_pydict()
    tokens = read_docid_tokens(index80 / "docids" / "docids.parquet")
    for i in (0, 7, len(real_pairs) - 1):
        ex = real_pairs.example(i)
        p = int(real_pairs.prompt_lengths[i])
        prompt = encode_prompt(tokenizer, table["facet"][i], table["source_text"][i])
        assert ex["input_ids"][:p].tolist() == prompt
        assert tokenizer.decode(prompt).startswith(f"Facet: {table['facet'][i]}\nQuery: ")
        target = tokens[(table["facet"][i], table["target_docid_id"][i])] + [tokenizer.eos_token_id]
        assert ex["input_ids"][p:].tolist() == target  # exactly the trie's sequence, then EOS
        assert (ex["labels"][:p] == IGNORE_INDEX).all() and ex["labels"][p:].tolist() == target


def test_left_padded_target_logits_give_the_same_loss(tokenizer) -> None:
    """Oracle: the fast collation (left padding, LM head on target positions only) and the plain
    one (right padding, full logits) give the same loss on the same examples."""
    data = _hand_pairs(tokenizer, 6)
    examples = [data.example(i) for i in range(6)]
    fast = Collator(tokenizer.pad_token_id)(examples)
    plain = Collator(tokenizer.pad_token_id, target_logits_only=False)(examples)
    assert fast["logits_to_keep"] < fast["input_ids"].shape[1]
    assert (plain["labels"] == IGNORE_INDEX).sum() > (fast["labels"] == IGNORE_INDEX).sum()
    model = _tiny().eval()
    with torch.no_grad():
        torch.testing.assert_close(model(**fast).loss, model(**plain).loss, rtol=1e-5, atol=1e-5)


def test_length_grouping_pads_less_than_random_batches(real_pairs) -> None:
    lengths = real_pairs.lengths
    grouped = length_grouped_batches(lengths, 16, seed=1)
    assert sorted(i for b in grouped for i in b) == list(range(len(lengths)))  # each example once
    assert grouped == length_grouped_batches(lengths, 16, seed=1)
    assert grouped != length_grouped_batches(lengths, 16, seed=2)
    assert max(lengths[grouped[0]]) == lengths.max()  # the longest batch first (OOM shows at once)
    rand = padding_fraction(random_batches(len(lengths), 16, seed=1), lengths)
    assert padding_fraction(grouped, lengths) < rand / 3


def test_batch_plan_splits_steps_over_processes_and_accumulation(real_pairs) -> None:
    one = BatchPlan(real_pairs.lengths, 4, 1, 1, seed=3)
    split = BatchPlan(real_pairs.lengths, 4, 2, 2, seed=3)  # 2 accumulation steps x 2 processes
    for s in range(3):
        mine = [b for r in range(2) for b in split.step(s, r)]
        assert sorted(map(tuple, mine)) == sorted(tuple(one.micro_batch(g)) for g in range(4 * s, 4 * s + 4))
        assert split.step_tokens(s) == sum(one.step_tokens(g) for g in range(4 * s, 4 * s + 4))
    # the stream crosses into the next epoch with a fresh order
    assert one.micro_batch(one.per_epoch) != one.micro_batch(0) or one.per_epoch == 1


def _shared_prompt_examples(tokenizer, n_prompts: int = 4, n: int = 14) -> list[dict]:
    """Examples whose prompts repeat (as a source item's do across its targets), of varied lengths."""
    data = _hand_pairs(tokenizer, n_prompts)
    rng = np.random.default_rng(1)
    out = []
    for _ in range(n):
        p = data.example(int(rng.integers(n_prompts)))
        prompt = p["input_ids"][: p["prompt_length"]]
        target = np.r_[rng.integers(100, 40000, int(rng.integers(1, 8))), tokenizer.eos_token_id].astype(np.int32)
        ids = np.r_[prompt, target]
        labels = ids.astype(np.int64)
        labels[: len(prompt)] = IGNORE_INDEX
        out.append({"input_ids": ids, "labels": labels, "prompt_length": len(prompt)})
    return out


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_packed_prompts_give_the_plain_loss_and_gradients(tokenizer, attention) -> None:
    """Oracle for prompt sharing: a micro-batch packed with each prompt once (4D mask, position ids
    continuing from the prompt's end) gives the plain layout's loss and gradients, in one row or
    split over rows (a prompt's targets over several rows too). Tolerance: 1e-5 relative (float32
    sums in another order)."""
    from training.packing import PackedCollator, packed_loss

    examples = _shared_prompt_examples(tokenizer)
    model = _tiny()
    model.config._attn_implementation = attention

    def loss_and_grads(loss_of):
        model.zero_grad(set_to_none=True)
        loss = loss_of()
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    plain_loss, plain_grads = loss_and_grads(
        lambda: model(**Collator(tokenizer.pad_token_id, target_logits_only=False)(examples)).loss)
    for row_tokens in (512, 40):
        packed = PackedCollator(tokenizer.pad_token_id, row_tokens, attention=attention)(examples)
        assert packed["tokens"] < sum(len(e["input_ids"]) for e in examples) * 0.6  # the prompts once
        assert (packed["input_ids"].shape[0] == 1) == (row_tokens == 512)
        loss, grads = loss_and_grads(lambda packed=packed: packed_loss(model, packed))
        torch.testing.assert_close(loss, plain_loss, rtol=1e-5, atol=1e-6)
        for name, g in grads.items():
            torch.testing.assert_close(g, plain_grads[name], rtol=1e-5, atol=1e-5 * float(plain_grads[name].abs().max()),
                                       msg=lambda m, name=name: f"{name}: {m}")
    # the targets do not see each other: changing one target leaves the other targets' losses as they were
    a, b = examples[0], dict(examples[0])
    b["input_ids"] = np.r_[a["input_ids"][: a["prompt_length"]], [777, 778, tokenizer.eos_token_id]].astype(np.int32)
    c = dict(b)
    c["input_ids"] = np.r_[a["input_ids"][: a["prompt_length"]], [901, 902, 903, 904, tokenizer.eos_token_id]].astype(
        np.int32)
    collate = PackedCollator(tokenizer.pad_token_id, attention=attention)
    with torch.no_grad():
        alone = packed_loss(model, collate([b]))
        beside = packed_loss(model, collate([b, c]))
        c_alone = packed_loss(model, collate([c]))
    # beside = the token-weighted mean of the two targets' own losses (3 and 5 target tokens)
    torch.testing.assert_close(beside, (3 * alone + 5 * c_alone) / 8, rtol=1e-5, atol=1e-6)


def test_prompt_packing_refuses_a_model_without_4d_masks(tokenizer) -> None:
    from training.packing import PackedCollator

    with pytest.raises(ValueError, match="flash_attention_2.*--no-pack"):
        PackedCollator(0, attention="flash_attention_2")
    model = _tiny()
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="pack_prompts needs a model.*--no-pack"):
        fit(model, tokenizer, _hand_pairs(tokenizer, 4), None, TrainConfig(max_steps=1, batch_size=4), quiet=True)


def test_prompt_grouped_batches_keep_a_prompts_pairs_together(real_pairs) -> None:
    from training.packing import prompt_grouped_batches

    groups = real_pairs.prompt_groups()
    assert len(set(groups.tolist())) < len(real_pairs) / 3  # real pairs: a source item feeds several targets
    batches = prompt_grouped_batches(groups, 16, seed=1, lengths=real_pairs.lengths)
    assert sorted(i for b in batches for i in b) == list(range(len(real_pairs)))  # each pair once per epoch
    assert len(batches) == len(length_grouped_batches(real_pairs.lengths, 16, seed=1))  # as many steps
    assert batches == prompt_grouped_batches(groups, 16, seed=1, lengths=real_pairs.lengths)
    assert batches != prompt_grouped_batches(groups, 16, seed=2, lengths=real_pairs.lengths)
    heaviest = max(int(real_pairs.lengths[b].sum()) for b in batches)
    assert int(real_pairs.lengths[batches[0]].sum()) == heaviest  # the heaviest batch first (OOM at step one)
    # a prompt's pairs are adjacent: each batch holds a few prompts, random batches nearly one per pair
    prompts_per_batch = np.mean([len(set(groups[b].tolist())) for b in batches])
    random_prompts = np.mean([len(set(groups[b].tolist())) for b in random_batches(len(groups), 16, seed=1)])
    assert prompts_per_batch < 5 < 12 < random_prompts
    plan = BatchPlan(real_pairs.lengths, 16, seed=1, groups=groups)
    assert plan.micro_batch(0) == prompt_grouped_batches(groups, 16, seed=epoch_seed(1, 0), lengths=real_pairs.lengths)[0]


def test_packed_and_plain_training_take_the_same_steps(tokenizer) -> None:
    """With the whole data set as each step's batch (so the batch order cannot differ), training with
    packed prompts takes the plain trainer's steps: the same losses and weights after 4 steps."""
    data = encode_pairs(tokenizer, *zip(*[(f, s, d) for f, s in (("method", "graph neural retrieval"),
                                                                 ("result", "dense sparse survey"))
                                          for d in ("citation graph", "language model", "benchmark")]))
    runs = {}
    for pack in (True, False):
        config = TrainConfig(max_steps=4, batch_size=6, lr=1e-3, warmup_ratio=0.0, logging_steps=1, pack_prompts=pack)
        runs[pack] = fit(_tiny(), tokenizer, data, None, config, quiet=True)
    assert len(set(data.prompt_groups().tolist())) == 2
    packed, plain = runs[True], runs[False]
    assert [s for s, _ in packed.losses] == [1, 2, 3, 4]
    np.testing.assert_allclose([v for _, v in packed.losses], [v for _, v in plain.losses], rtol=1e-5)
    assert packed.losses[-1][1] < packed.losses[0][1]
    # AdamW divides each gradient by its running size, so a weight whose gradient is a rounding error
    # (~1e-9) moves by up to lr = 1e-3 either way: the two float sums differ by up to ~1e-5 on one
    # element of 8,192 after 4 steps (torch 2.13); every other weight agrees to 1e-6
    for (name, a), b in zip(packed.model.state_dict().items(), plain.model.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=2e-5, msg=lambda m, name=name: f"{name}: {m}")
        assert (a - b).abs().gt(1e-6).float().mean() < 1e-3, name
    assert packed.tokens == plain.tokens and packed.pairs_per_s > 0


def test_a_shallower_decoder_with_frozen_embeddings_trains_saves_and_reloads(tokenizer, tmp_path) -> None:
    """--layers 1 keeps the base model's first decoder layer (the others' weights never enter), and
    --freeze-embeddings leaves the tied embedding/LM-head tensor as it was; the saved model reloads as
    the 1-layer model it is and gives the trained model's logits."""
    from transformers import AutoModelForCausalLM

    base = _tiny()
    first = {k: v.clone() for k, v in base.state_dict().items() if k.startswith("model.layers.0.")}
    embedding = base.get_input_embeddings().weight.detach().clone()
    data = _hand_pairs(tokenizer, 12)
    config = TrainConfig(max_steps=4, batch_size=4, lr=1e-2, warmup_ratio=0.0, logging_steps=1, save_every_steps=0,
                         layers=1, freeze_embeddings=True)
    result = fit(copy.deepcopy(base), tokenizer, data, tmp_path / "model", config, quiet=True)
    model = result.model
    assert len(model.model.layers) == 1 and model.config.num_hidden_layers == 1
    assert not any(k.startswith("model.layers.1.") for k in model.state_dict())
    torch.testing.assert_close(model.get_input_embeddings().weight, embedding, rtol=0, atol=0)
    assert any(not torch.equal(model.state_dict()[k], v) for k, v in first.items())  # the kept layer trained
    assert result.losses[-1][1] < result.losses[0][1]
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "model").eval()
    assert loaded.config.num_hidden_layers == 1
    ids = torch.as_tensor(np.asarray(data.example(0)["input_ids"]))[None]
    torch.testing.assert_close(loaded(input_ids=ids).logits, model.eval()(input_ids=ids).logits)
    with pytest.raises(ConfigError, match="has 2 decoder layers"):
        fit(_tiny(), tokenizer, data, None, TrainConfig(max_steps=1, batch_size=4, layers=3), quiet=True)
    with pytest.raises(ConfigError, match="layers must be >= 1"):
        TrainConfig(layers=0)


def test_progress_shows_as_log_lines_when_output_is_not_a_terminal(tokenizer, capsys) -> None:
    """A run whose output goes to a file prints a plain line every `progress_every_s` seconds (here:
    every step) and at the end: step, loss, pairs/s, tokens/s, ETA; with a long interval only the end."""
    data = _hand_pairs(tokenizer, 12)
    fit(_tiny(), tokenizer, data, None, TrainConfig(max_steps=3, batch_size=4, logging_steps=1, progress_every_s=0),
        quiet=False)
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("train: step")]
    assert len(lines) == 3, lines
    pattern = (r"train: step (\d)/3 \(\d+\.\d%\) loss \d+\.\d{4} pairs/s [\d,.]+ tokens/s [\d,]+ "
               r"elapsed \d:\d\d:\d\d eta \d:\d\d:\d\d")
    assert [int(re.fullmatch(pattern, x).group(1)) for x in lines] == [1, 2, 3]
    assert lines[-1].endswith("eta 0:00:00")
    fit(_tiny(), tokenizer, data, None, TrainConfig(max_steps=3, batch_size=4, progress_every_s=3600), quiet=False)
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("train: step")]
    assert len(lines) == 1 and lines[0].startswith("train: step 3/3 (100.0%)")
    fit(_tiny(), tokenizer, data, None, TrainConfig(max_steps=2, batch_size=4, progress_every_s=0), quiet=True)
    assert "train:" not in capsys.readouterr().out
    with pytest.raises(ValueError, match="progress_every_s must be finite and >= 0"):
        TrainConfig(progress_every_s=-1.0)


def test_train_config_refuses_unknown_keys_and_bad_values() -> None:
    with pytest.raises(ValueError, match="unknown key.*learning_rate"):
        TrainConfig.from_dict({"learning_rate": 1e-4})
    with pytest.raises(ValueError, match="max_steps"):
        TrainConfig(max_steps=0)
    assert TrainConfig().batch_size == 16 and TrainConfig().lr == 5e-5 and TrainConfig().epochs == 2


# ---- learning ------------------------------------------------------------------------------------
def load_retriever_model(index_dir):
    """The model `graft train` saved in INDEX/model, on the CPU."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(index_dir / "model")


def test_tiny_loss_falls_on_the_real_graph(index80) -> None:
    from graft.manifest import read_manifest
    from training.pipeline import train_index

    config = TrainConfig(max_steps=40, lr=2e-3, save_every_steps=0, logging_steps=5)
    summary = train_index(index80, config, base_model="tiny")
    r = summary.result
    assert summary.pairs_reused and r.steps == 40 and r.resumed_from is None
    first, last = r.losses[0][1], r.final_loss
    assert last < first - 1.5, r.losses
    model_dir = index80 / "model"
    for name in ("config.json", "model.safetensors", "tokenizer.json", "training_config.json"):
        assert (model_dir / name).is_file()
    import stat

    from graft.store import FILE_MODE

    # the model's files and its finished-model marker get a plain file's mode (the marker and
    # model.safetensors were owner-only, written through temporary files)
    for path in model_dir.iterdir():
        if path.is_file():
            assert stat.S_IMODE(path.stat().st_mode) == FILE_MODE, path.name
    assert not (model_dir / "checkpoints").exists()
    from graft.describe import index_summary
    from graft.index import Index

    shown = index_summary(Index.open(index80))  # `graft info`
    assert shown["model"]["steps"] == 40 and shown["model"]["base_model"] == "tiny"
    assert shown["model"]["final_loss"] == pytest.approx(r.final_loss)
    assert shown["pairs"]["sampling"] == "coverage" and shown["pairs"]["papers_share"] == 1.0
    stage = read_manifest(index80)["stages"]["train"]
    assert stage["counts"]["steps"] == 40 and stage["counts"]["pairs"] == summary.pairs
    assert stage["config"]["train"]["lr"] == 2e-3 and stage["config"]["base_model"]["name"] == "tiny"
    assert stage["final_loss"] == pytest.approx(last)
    # the stage's timings are this call's parts and add up to no more than its total
    assert stage["timings_s"]["train"] <= stage["timings_s"]["total"]
    assert stage["train_seconds_all_parts"] == pytest.approx(r.seconds, abs=1e-3)
    # the prompt check decoded 32 of its training prompts; the saved model decodes them the same way
    from graft.check import prompt_check
    from graft.docids import load_tries

    assert stage["check"] == summary.check and shown["model"]["check"] == summary.check
    assert summary.check["pairs"] == 32 and 1 <= summary.check["distinct_top_beams"] <= 32
    saved = load_retriever_model(index80)
    again_check = prompt_check(saved, load_tokenizer("tiny"), load_tries(index80),
                               read_pairs(index80 / "train" / "pairs.parquet"))
    assert again_check.to_dict() | {"seconds": 0} == summary.check | {"seconds": 0}
    # the same command again finds the finished model and trains nothing, and reports its check
    again = train_index(index80, config, base_model="tiny")
    assert again.result.already_done and again.result.steps == 40 and again.check == summary.check
    # weights without the record written after them: a final save that did not finish
    from graft.errors import GraftError
    from graft.manifest import has_model
    from graft.retriever import load_retriever

    assert has_model(index80)
    marker = model_dir / "training_config.json"
    record = marker.read_bytes()
    marker.unlink()
    try:
        assert not has_model(index80)
        idx = Index.open(index80)
        assert idx.query(paper=idx.paper_ids[0], k=3).retriever == "teacher"  # the default falls back
        with pytest.raises(GraftError, match="unfinished"):
            load_retriever(idx)
    finally:
        marker.write_bytes(record)


def test_tiny_learns_30_pairs_exactly(index80, tokenizer) -> None:
    """Overfit: 30 real (query item -> DocID) pairs are decoded back exactly with greedy search."""
    table = read_pairs(index80 / "train" / "pairs.parquet").to_pydict()
    tokens = read_docid_tokens(index80 / "docids" / "docids.parquet")
    seen, rows = set(), []
    for i, key in enumerate(zip(table["facet"], table["source_text"])):
        if key not in seen:  # one target per query, so the mapping is learnable
            seen.add(key)
            rows.append(i)
        if len(rows) == 30:
            break
    cols = {k: [table[k][i] for i in rows] for k in ("facet", "source_text", "target_docid", "target_docid_id")}
    targets = [tokens[(f, d)] for f, d in zip(cols["facet"], cols["target_docid_id"])]
    data = encode_pairs(tokenizer, cols["facet"], cols["source_text"], cols["target_docid"], target_ids=targets)
    result = fit(_tiny(), tokenizer, data, None, TrainConfig(epochs=50, batch_size=10, lr=1e-2, warmup_ratio=0.05,
                                                             logging_steps=50), quiet=True)
    model = result.model.eval()
    hits = 0
    for f, s, t in zip(cols["facet"], cols["source_text"], targets):
        ids = torch.tensor([encode_prompt(tokenizer, f, s)])
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=len(t) + 2, do_sample=False,
                             eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        hits += out[0, ids.shape[1]:].tolist() == t + [tokenizer.eos_token_id]
    assert hits == 30, f"{hits}/30 exact; losses {result.losses}"
    # the memorisation measure of the same pairs (trie-constrained beams): every taught target comes back,
    # as the top beam; an untrained model's do not
    import pyarrow as pa

    from graft.check import memorisation
    from graft.docids import load_tries

    taught = pa.table({k: cols[k] for k in ("facet", "source_text", "target_docid_id")})
    learned = memorisation(model, tokenizer, load_tries(index80), taught, beams=3)
    assert (learned.pairs, learned.prompts) == (30, 30)
    assert learned.target_in_beams == 1.0 and learned.top_beam_taught == 1.0 and learned.distinct_top_beams > 0.5
    fresh = memorisation(_tiny().eval(), tokenizer, load_tries(index80), taught, beams=3)
    assert fresh.target_in_beams < 0.5


class _Killed(Exception):
    pass


@pytest.mark.slow
def test_kill_and_resume_reaches_the_same_step_and_weights(tokenizer, tmp_path) -> None:
    data = _hand_pairs(tokenizer, 40)
    config = TrainConfig(max_steps=12, batch_size=4, lr=1e-3, save_every_steps=4, logging_steps=2)
    whole = fit(_tiny(), tokenizer, data, tmp_path / "whole", config, quiet=True)

    def kill_at_10(step, info):
        if step == 10:
            raise _Killed

    run = tmp_path / "index" / "model"
    with pytest.raises(_Killed):
        fit(_tiny(), tokenizer, data, run, config, quiet=True, on_step=kill_at_10, record={
            "base_model": {"name": "tiny"}, "sampling": "naive"})
    from graft.describe import unfinished_training

    assert unfinished_training(run.parent) == {"step": 8, "total_steps": 12, "base_model": "tiny", "sampling": "naive",
                                               "max_edges": None, "config": {"epochs": 2.0, "max_steps": 12, "batch_size": 4, "lr": 1e-3}}
    ckpts = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert ckpts == ["step-4", "step-8"]  # save_total_limit=2 keeps the newest two
    assert not (run / "training_config.json").exists()
    state = json.loads((run / "checkpoints" / "step-8" / "trainer_state.json").read_text())
    assert state["step"] == 8 and state["config"]["lr"] == 1e-3 and state["data_seed"] == 42
    # a checkpoint killed while being written (no trainer_state.json yet) is never resumed from
    (run / "checkpoints" / "step-10").mkdir()
    (run / "checkpoints" / "step-10" / "model.safetensors").write_bytes(b"half")
    # another setting must not silently resume this run
    with pytest.raises(ValueError, match="another run"):
        fit(_tiny(), tokenizer, data, run, TrainConfig(**{**config.to_dict(), "lr": 2e-3}), quiet=True)

    resumed = fit(_tiny(), tokenizer, data, run, config, quiet=True, record={  # the same command again
        "base_model": {"name": "tiny"}, "sampling": "naive"})
    assert resumed.resumed_from == 8 and resumed.steps == whole.steps == 12
    assert resumed.tokens == whole.tokens and resumed.losses == whole.losses
    # the run's time counts the interrupted part up to step 8; this call's time only its own part
    assert resumed.seconds == pytest.approx(state["seconds"] + resumed.call_seconds)
    assert 0 < resumed.call_seconds < resumed.seconds
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name  # bit-identical on the CPU
    assert not (run / "checkpoints").exists() and (run / "training_config.json").is_file()


# ---- entry points --------------------------------------------------------------------------------
def test_cli_train_command(index80, tmp_path) -> None:
    import typer

    from cli.train_cmd import train
    from graft.index import Index

    app = typer.Typer()
    app.command("train")(train)
    app.command("noop")(lambda: None)  # two commands, so "train" is a subcommand as in `graft`
    runner = CliRunner()
    res = runner.invoke(app, ["train", str(index80), "--base-model", "tiny", "--max-steps", "3", "--no-resume",
                              "--check-pairs", "0"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "prompt check" not in res.stdout and "final loss" in res.stdout, res.output
    # output not a terminal: progress lines (here only the last, the interval being 120 s); prompts shared
    assert re.search(r"^train: step 3/3 \(100\.0%\) loss [\d.]+ pairs/s .* eta 0:00:00$", res.stdout, re.M), res.stdout
    from graft.manifest import read_manifest

    assert read_manifest(index80)["stages"]["train"]["config"]["train"]["pack_prompts"] is True
    res = runner.invoke(app, ["train", str(index80), "--base-model", "tiny", "--max-steps", "2", "--no-resume",
                              "--check-pairs", "0", "--no-pack", "--progress-every", "0"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert len(re.findall(r"^train: step [12]/2 ", res.stdout, re.M)) == 2, res.stdout  # a line every step
    assert read_manifest(index80)["stages"]["train"]["config"]["train"]["pack_prompts"] is False
    res = runner.invoke(app, ["train", str(index80), "--base-model", "tiny", "--progress-every", "-1"])
    assert res.exit_code == 2 and "Invalid value for '--progress-every'" in res.output
    res = runner.invoke(app, ["train", str(index80), "--base-model", "tiny", "--check-pairs", "-1"])
    assert res.exit_code == 2 and "Invalid value for '--check-pairs'" in res.output
    res = runner.invoke(app, ["train", str(index80), "--base-model", "tiny", "--max-steps", "3", "--no-resume",
                              "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["result"]["steps"] == 3 and out["pairs_reused"] and out["model_dir"].endswith("model")
    assert out["check"]["pairs"] == 32 and isinstance(out["check"]["learned"], bool)
    # a model that decodes the same DocID for every prompt: `graft info` and the summary say so
    from cli.train_cmd import _check_warning

    collapsed = {**out["check"], "distinct_top_beams": 1, "target_in_beams": 1.0, "learned": False}
    assert "(1 distinct of 32)" in _check_warning(collapsed)
    assert _check_warning(out["check"] | {"distinct_top_beams": 32, "target_in_beams": 0.5}) is None
    from cli.app import app as graft_app

    path = index80 / "manifest.json"
    saved = path.read_bytes()
    manifest = json.loads(saved)
    manifest["stages"]["train"]["check"] = collapsed
    path.write_text(json.dumps(manifest))
    try:
        res = runner.invoke(graft_app, ["info", str(index80)], env={"COLUMNS": "300"})
        assert res.exit_code == 0, res.output
        assert "prompt check: 32 training prompts decoded (5 beams): 1 distinct top DocIDs" in res.stdout
        assert "warning: the model decodes the same few DocIDs for most prompts (1 distinct of 32)" in res.stdout
        # a model that failed its check does not answer by default: the teacher does, and says why
        pid = Index.open(index80).paper_ids[0]
        res = runner.invoke(graft_app, ["query", str(index80), "--paper", pid, "--k", "3", "--json"])
        assert res.exit_code == 0, res.output
        payload = json.loads(res.stdout)
        assert payload["retriever"] == "teacher" and payload["model"] == "none (graph walk)"
        assert "the graph teacher answers" in res.stderr and "decodes the same few DocIDs" in res.stderr
        assert "the graph teacher answers" in payload["info"]["note"]
        res = runner.invoke(graft_app, ["query", str(index80), "--paper", pid, "--k", "3", "--retriever", "graft",
                                        "--beams", "2", "--json"])  # asked for: it answers, named with its check
        assert res.exit_code == 0 and json.loads(res.stdout)["retriever"] == "graft", res.output
        assert "prompt check: NOT learned" in json.loads(res.stdout)["model"]
        learned = {**out["check"], "distinct_top_beams": 32, "target_in_beams": 0.5, "learned": True}
        manifest["stages"]["train"]["check"] = learned
        path.write_text(json.dumps(manifest))
        res = runner.invoke(graft_app, ["query", str(index80), "--paper", pid, "--k", "3", "--beams", "2", "--json"])
        assert res.exit_code == 0 and json.loads(res.stdout)["retriever"] == "graft", res.output
        assert "tiny" in json.loads(res.stdout)["model"] and "the graph teacher answers" not in res.stderr
        manifest["stages"]["train"]["check"] = collapsed
        manifest["stages"]["train"]["check"] = {"pairs": "many"}  # damaged: not shown, no traceback
        path.write_text(json.dumps(manifest))
        res = runner.invoke(graft_app, ["info", str(index80)], env={"COLUMNS": "300"})
        assert res.exit_code == 0 and "prompt check" not in res.stdout and "trained model" in res.stdout, res.output
    finally:
        path.write_bytes(saved)
    res = runner.invoke(app, ["train", str(index80), "--base-model", "tiny", "--dry-run"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "coverage-aware" in res.stdout and "100.00%" in res.stdout
    counts = {}
    for n in ("2", "20"):  # N: sampled out-edges per source paper and facet
        res = runner.invoke(app, ["train", str(index80), "--base-model", "tiny", "--dry-run", "--max-edges", n,
                                  "--json"])
        assert res.exit_code == 0, res.output
        out = json.loads(res.stdout)
        assert out["coverage"]["config"]["max_edges_per_source"] == int(n)
        counts[n] = out["coverage"]["coverage"]["pairs"]
    assert counts["2"] < counts["20"]
    res = runner.invoke(app, ["train", str(index80), "--base-model", "tiny", "--dry-run", "--max-edges", "0"])
    assert res.exit_code == 2 and "Invalid value for '--max-edges'" in res.output
    res = runner.invoke(app, ["train", str(tmp_path / "nowhere"), "--base-model", "tiny"])
    assert res.exit_code == 2 and "graft build" in res.output
    res = runner.invoke(app, ["train", str(index80), "--base-model", str(tmp_path)])
    assert res.exit_code == 2 and "never downloads" in res.output


def test_train_refuses_before_writing_anything(index80, tmp_path, monkeypatch) -> None:
    """Settings fit() would refuse, a damaged input file and an index another run is writing are
    refused before DocIDs, pairs or a model are written."""
    import shutil

    from graft.errors import IndexFormatError
    from graft.store import index_lock
    from training.pipeline import train_index

    index = tmp_path / "index"
    shutil.copytree(index80, index, ignore=shutil.ignore_patterns("docids", "train", "model"))

    def written() -> list[str]:
        return sorted(name for name in ("docids", "train", "model") if (index / name).exists())

    with pytest.raises(ValueError, match="batch_size 16 is not a multiple of per-device batch 5"):
        train_index(index, TrainConfig(batch_size=16, per_device_batch_size=5), base_model="tiny")
    assert written() == []
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="bf16=True needs a CUDA GPU"):
            train_index(index, TrainConfig(bf16=True), base_model="tiny")
        assert written() == []
    with index_lock(index, "graft train"):  # another `graft train` (or a build) is writing this index
        with pytest.raises(GraftError, match="being written by `graft train`"):
            train_index(index, TrainConfig(max_steps=1), base_model="tiny")
    assert written() == []
    # held by another process: refused at once, before the tokenizer loads
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from graft.store import index_lock\n"
                               "with index_lock(sys.argv[1], 'graft build'):\n    print('held', flush=True); "
                               "time.sleep(60)", str(index)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        import training.pipeline as pipeline

        def no_tokenizer(*_a, **_k):
            raise AssertionError("the tokenizer was loaded before the lock was checked")

        monkeypatch.setattr(pipeline, "load_tokenizer", no_tokenizer)
        with pytest.raises(GraftError, match=r"being written by `graft build` \(pid \d+"):
            train_index(index, TrainConfig(max_steps=1), base_model="tiny")
        monkeypatch.undo()
    finally:
        holder.kill()
        holder.wait()
    whole = (index / "graph" / "method.npz").read_bytes()
    (index / "graph" / "method.npz").write_bytes(whole[: len(whole) // 3])
    with pytest.raises(IndexFormatError, match="graph/method.npz cannot be read"):
        train_index(index, TrainConfig(max_steps=1), base_model="tiny")
    assert written() == []
    (index / "graph" / "method.npz").write_bytes(whole)
    summary = train_index(index, TrainConfig(max_steps=1), base_model="tiny")
    assert summary.result.steps == 1 and written() == ["docids", "model", "train"]


def test_accelerate_entry_point_runs_single_process(index80) -> None:
    """`accelerate launch -m cli.app train INDEX` (several GPUs) runs `graft train`'s module as a
    script: one process here, the same summary."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "cli.app", "train", str(index80), "--base-model", "tiny",
                          "--max-steps", "2", "--quiet", "--no-resume", "--check-pairs", "0", "--json"],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["result"]["steps"] == 2


def test_gpu_benchmark_script_smoke(index80, tmp_path) -> None:
    """experiments/gpu/gpu_train.py --smoke: tiny shapes, tiny models, CPU; checks it writes its tables."""
    from experiments.gpu.gpu_train import main

    out = tmp_path / "out"
    assert main(["run", "--smoke", "--index", str(index80), "--out", str(out), "--work", str(tmp_path / "work"),
                 "--quiet"]) == 0
    report = json.loads((out / "gpu_train.json").read_text())
    assert {r["model"] for r in report["speed"]} == {"smollm2-135m", "llama-3.2-1b-arch"}
    assert all(r["trainer_tokens_per_s"] > 0 and r["bare_tokens_per_s"] > 0 for r in report["speed"])
    assert report["train"]["steps"] > 0 and "| model |" in (out / "gpu_train.md").read_text()


def test_learn_pairs_benchmark_smoke(index80, tmp_path) -> None:
    """experiments/learn_pairs.py with the tiny model: its sampled pairs are learned and decoded
    back under the tries (every target the top beam), and the table is written."""
    from experiments.learn_pairs import main
    from graft.check import sample_pairs

    table = sample_pairs(read_pairs(index80 / "train" / "pairs.parquet"), 10, seed=0)
    assert len(set(zip(table.column("facet").to_pylist(), table.column("source_text").to_pylist()))) == 10
    # two prompts may share a target paper; every distinct target must come back as a top beam
    targets = len(set(table.column("target_docid_id").to_pylist()))
    assert targets >= 8
    assert main(["--index", str(index80), "--base-model", "tiny", "--pairs", "10", "--steps", "60", "--batch-size",
                 "10", "--lr", "1e-2", "--beams", "3", "--results", str(tmp_path), "--name", "slice"]) == 0
    row = json.loads((tmp_path / "learn_pairs_slice.json").read_text())["rows"][0]
    assert row["pairs"] == 10 and row["epochs"] == 60 and row["losses"][-1][1] < row["losses"][0][1]
    assert row["target_is_top_beam"] == row["target_in_beams"] == 1.0 and row["distinct_top_beams"] == targets
    assert "| 10 | 60 | 10 | 0.01 | 60.0 |" in (tmp_path / "learn_pairs_slice.md").read_text()


def test_prompt_check_tells_a_model_that_reads_its_prompts_from_one_that_does_not(index80, tokenizer) -> None:
    """Ten source items of one facet: a model taught their (mostly different) targets decodes each
    distinct target as a top beam and passes; the same model taught one target for all ten (the collapse of an under-trained
    model, made on purpose) decodes one and gets the warning."""
    import pyarrow as pa

    from graft.check import PromptCheck, prompt_check, sample_pairs
    from graft.docids import load_tries

    pairs = read_pairs(index80 / "train" / "pairs.parquet")
    one_facet = pairs.filter(pa.compute.equal(pairs.column("facet"), "method"))
    table = sample_pairs(one_facet, 10, seed=0)
    # prompts of one facet may share a target paper: the taught model's top beams are its distinct targets
    targets = len(set(table.column("target_docid_id").to_pylist()))
    assert targets >= 8
    same = table.set_column(table.schema.get_field_index("target_docid_id"), "target_docid_id",
                            pa.array([table.column("target_docid_id")[0].as_py()] * 10,
                                     type=table.schema.field("target_docid_id").type))
    tokens = read_docid_tokens(index80 / "docids" / "docids.parquet")
    tries = load_tries(index80)
    checks = {}
    for name, t in (("distinct targets", table), ("one target", same)):
        model, _ = resolve_base_model("tiny", seed=0)
        data = encode_pairs_table(t, tokenizer, docid_tokens=tokens)
        result = fit(model, tokenizer, data, None, TrainConfig(max_steps=60, batch_size=10, lr=1e-2, warmup_ratio=0.0),
                     quiet=True, save_final=False)
        checks[name] = prompt_check(result.model, tokenizer, tries, t, pairs=10, beams=3)
    good, bad = checks["distinct targets"], checks["one target"]
    assert good.distinct_top_beams == targets and good.target_is_top_beam == 1.0 and good.learned
    assert good.warning() is None and good.verdict() == "learned its pairs"
    assert bad.distinct_top_beams == 1 and bad.target_is_top_beam == 1.0 and bad.collapsed and not bad.learned
    assert "(1 distinct of 10)" in bad.warning() and "Train longer" in bad.warning()
    # the thresholds: a quarter of the prompts distinct, the taught target among the beams for a tenth
    assert PromptCheck(32, 5, 0.0, 0.1, 8, 1.0).learned and PromptCheck(32, 5, 0.0, 0.1, 7, 1.0).collapsed
    # distinct beams that are not the taught targets: a model near its base, continuing the query's words
    near_base = PromptCheck(32, 5, 0.03125, 0.03125, 20, 1.0)
    assert near_base.misses and not near_base.collapsed and not near_base.learned
    assert "among its 5 beams for 1 of 32 training prompts" in near_base.warning()
    assert near_base.verdict() == "NOT learned: rarely decodes its taught targets (under-trained)"
    assert PromptCheck.from_dict(bad.to_dict()) == bad
    assert PromptCheck.from_dict({"pairs": 3}) is None and PromptCheck.from_dict(None) is None


def test_prompt_text_is_plain_and_names_the_facet() -> None:
    assert prompt_for("method", "  We  use\ngraphs ") == "Facet: method\nQuery: We use graphs\nDocID:\n"


def test_long_queries_are_cut_but_targets_never(tokenizer) -> None:
    long = " ".join(["contrastive graph retrieval"] * 200)
    data = encode_pairs(tokenizer, ["result"], [long], ["a short docid"], max_length=64)
    ids, p = data.input_ids[0], int(data.prompt_lengths[0])
    assert len(ids) <= 64
    assert tokenizer.decode(ids[:p]).endswith("\nDocID:\n")
    assert ids[p:].tolist() == tokenizer.encode("a short docid", add_special_tokens=False) + [tokenizer.eos_token_id]


def test_the_gpu_training_run_imports_without_polars_or_marisa_trie() -> None:
    """The GPU image lacks polars and marisa-trie and `gpu_train.py` carries neither: the trainer,
    its data, checkpoints and base models must import without them (they are read with pyarrow)."""
    import subprocess
    import sys

    script = ("import sys; sys.modules['polars'] = None; sys.modules['marisa_trie'] = None\n"
              "import training.trainer, training.data, training.checkpoints, training.base_models, graft.prompts\n"
              "import experiments.gpu.gpu_train\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_fused_adamw_takes_the_foreach_steps(tokenizer) -> None:
    """The fused AdamW kernel (the default, also on the CPU) makes the foreach implementation's
    updates: the same weights after 3 steps, to float32 rounding."""
    data = _hand_pairs(tokenizer, 8)
    models = {}
    for fused in (True, False):
        config = TrainConfig(max_steps=3, batch_size=4, lr=1e-3, warmup_ratio=0.0, weight_decay=0.1, fused_adamw=fused)
        models[fused] = fit(_tiny(), tokenizer, data, None, config, quiet=True).model
    before = _tiny().state_dict()
    for (name, a), b in zip(models[True].state_dict().items(), models[False].state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7, msg=lambda m, name=name: f"{name}: {m}")
    assert any(not torch.equal(a, before[n]) for n, a in models[True].state_dict().items())
