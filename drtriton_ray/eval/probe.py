"""The reference probe: how many held-out reference lowerings a model writes greedily, token for token.

Greedy pass@1 (`drtriton eval-model`) costs minutes of generation and verification; the probe costs one forward pass
per program. The reference lowering of a synthesized program is verified, so a reference whose every answer token is
the model's greedy choice is one that greedy decoding writes and the verifier accepts. Counting them, apart for
programs whose operators are all elementwise and the others, shows what an RL step keeps and loses of what SFT
taught: a collapse onto the elementwise kernel template (docs/rl.md) is the second count falling.
A proxy for greedy pass@1, not pass@1: a model may write another correct kernel than the reference.

The sequences are built as SFT builds its pairs (prompt, answer tokens, end token), so the SFT model is probed on the
distribution it learnt."""

from __future__ import annotations

from dataclasses import dataclass

from drtriton_ray.eval.heldout import heldout_programs
from drtriton_ray.eval.policy import prompt_ids
from drtriton_ray.lower.elementwise import is_elementwise
from drtriton_ray.lower.emit import lower_program
from drtriton_ray.prompts import format_answer
from drtriton_ray.ir import Program

KINDS = ("elementwise", "other")


@dataclass(frozen=True)
class Probe:
    ids: list[int]  # prompt + reference answer + end token
    start: int  # where the answer begins
    elementwise: bool  # every operator of the program is elementwise


def reference_probes(tokenizer, level: int, count: int, profile: str = "small") -> list[Probe]:
    """Probes for held-out programs 0..count-1 at `level` (the stream `eval-model` evaluates)."""
    out = []
    for rec in heldout_programs(level, count, profile=profile):
        answer = format_answer(lower_program(Program.from_json(rec.dag), rec.source))
        prompt = prompt_ids(tokenizer, rec.source)
        ids = prompt + tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        out.append(Probe(ids, len(prompt), all(is_elementwise(op) for op in rec.ops)))
    return out


def probe_model(model, probes: list[Probe], device, bf16: bool) -> dict:
    """Per kind: probes, references written greedily (no answer token other than the argmax), mean greedy
    mismatches per reference and mean answer-token log-prob (temperature 1). One sequence per forward pass: no
    padding, so the numbers do not depend on what is batched with what."""
    import torch

    rows = []
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for p in probes:
            ids = torch.tensor([p.ids], device=device)
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
                logits = model(input_ids=ids).logits[0, p.start - 1 : -1].float()
            target = ids[0, p.start :]
            logp = logits.log_softmax(-1).gather(-1, target[:, None]).squeeze(-1)
            rows.append((int((logits.argmax(-1) != target).sum()), float(logp.mean()), p.elementwise))
    model.train(was_training)
    out = {}
    for kind in KINDS:
        part = [r for r in rows if r[2] == (kind == "elementwise")]
        n = max(len(part), 1)
        out[kind] = {
            "n": len(part),
            "greedy_exact": sum(r[0] == 0 for r in part),
            "mismatches": sum(r[0] for r in part) / n,
            "logp": sum(r[1] for r in part) / n,
        }
    return out


def probe_metrics(summary: dict) -> dict[str, float]:
    """`probe_model`'s summary as flat metrics (probe/exact_elementwise, ...)."""
    return {
        f"probe/{name}_{kind}": summary[kind][key]
        for kind in KINDS
        for name, key in (("exact", "greedy_exact"), ("mismatches", "mismatches"), ("logp", "logp"))
    }
