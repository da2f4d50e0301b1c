"""The reference probe (eval/probe.py) on the tiny model: a sequence the model writes greedily counts as written,
one changed token does not, and the held-out references split by whether their operators are elementwise."""

import pytest
import torch

from drtriton_ray.eval.heldout import heldout_programs
from drtriton_ray.eval.policy import prompt_ids
from drtriton_ray.eval.probe import Probe, probe_metrics, probe_model, reference_probes
from drtriton_ray.lower.elementwise import is_elementwise
from drtriton_ray.models import load_model, prepare_model

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def model_and_tokenizer(tmp_path_factory):
    path = prepare_model("tiny", tmp_path_factory.mktemp("models") / "tiny", seed=5)
    return load_model(str(path), "fp32")


def test_greedy_continuation_is_written_and_a_changed_token_is_not(model_and_tokenizer):
    model, tok = model_and_tokenizer
    source = heldout_programs(1, 1)[0].source
    prompt = prompt_ids(tok, source)
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False)[0].tolist()
    greedy = Probe(out, len(prompt), elementwise=True)
    changed = list(out)
    changed[len(prompt) + 5] = (changed[len(prompt) + 5] + 1) % model.config.vocab_size
    other = Probe(changed, len(prompt), elementwise=False)
    summary = probe_model(model, [greedy, other], CPU, bf16=False)
    assert summary["elementwise"] == pytest.approx(
        {"n": 1, "greedy_exact": 1, "mismatches": 0, "logp": summary["elementwise"]["logp"]}
    )
    assert summary["other"]["greedy_exact"] == 0 and summary["other"]["mismatches"] >= 1
    assert summary["other"]["logp"] < summary["elementwise"]["logp"] < 0
    assert probe_metrics(summary)["probe/exact_elementwise"] == 1 and model.training is False


def test_reference_probes_split_by_operator_kind(model_and_tokenizer):
    _, tok = model_and_tokenizer
    records = heldout_programs(1, 6)
    probes = reference_probes(tok, 1, 6)
    assert [p.elementwise for p in probes] == [all(is_elementwise(op) for op in r.ops) for r in records]
    assert any(p.elementwise for p in probes) and not all(p.elementwise for p in probes)
    for p, r in zip(probes, records):
        assert p.ids[: p.start] == prompt_ids(tok, r.source) and p.ids[-1] == tok.eos_token_id
        assert "class ModelNew" in tok.decode(p.ids[p.start :])
