"""`drtriton eval-model`'s declared option validation (EvalModelOptions): one bad value per declared constraint gives
one clear line and exit 2, before any model is read; the checks across options; the defaults that depend on other
options; and the model's fields matching the command's options, so a new option cannot skip validation."""

import inspect

import annotated_types
import pytest
from pydantic import AfterValidator, ValidationError
from typer.testing import CliRunner

from drtriton_ray.cli import app
from drtriton_ray.eval.cli import (
    DEFAULT_WORKERS,
    ENGINES,
    SAMPLED_TEMPERATURE,
    EvalModelOptions,
    eval_model_cmd,
    flag,
    options_error,
)

runner = CliRunner()
GOOD = {"model": "no/such/model", "level": 1, "count": 1}


def constraint_cases():
    """(field, a value that breaks the constraint, the message's words) for every constraint the model declares."""
    for name, field in EvalModelOptions.model_fields.items():
        for m in field.metadata:
            if isinstance(m, annotated_types.Ge):
                yield name, m.ge - 1, f"{flag(name)} must be >= {m.ge:g}, got {m.ge - 1}"
            elif isinstance(m, annotated_types.Gt):
                yield name, m.gt, f"{flag(name)} must be > {m.gt:g}, got {m.gt}"
            elif isinstance(m, AfterValidator):
                yield name, "nope", f"unknown {flag(name)} 'nope'; known: "
            else:
                raise AssertionError(f"{name}: a constraint this test does not know: {m!r}")


CASES = list(constraint_cases())


def test_every_numeric_and_choice_option_is_constrained():
    assert {c[0] for c in CASES} == {
        "level",
        "count",
        "samples",
        "temperature",
        "max_tokens",
        "engine",
        "device",
        "dtype",
        "profile",
        "baseline",
        "workers",
        "timeout",
    }


@pytest.mark.parametrize("name, value, words", CASES, ids=[c[0] for c in CASES])
def test_one_bad_value_per_constraint(name, value, words):
    with pytest.raises(ValidationError) as e:
        EvalModelOptions(**{**GOOD, name: value})
    assert (
        options_error(e.value) == words if not words.endswith("known: ") else options_error(e.value).startswith(words)
    )
    r = runner.invoke(app, ["eval-model", *[x for k, v in {**GOOD, name: value}.items() for x in (flag(k), str(v))]])
    assert r.exit_code == 2, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], r.output
    assert "Traceback" not in r.output and "no/such/model" not in r.output  # judged before the model is read


def test_choices_are_listed():
    with pytest.raises(ValidationError) as e:
        EvalModelOptions(**GOOD, engine="llamacpp")
    assert options_error(e.value) == f"unknown --engine 'llamacpp'; known: {', '.join(ENGINES)}"
    with pytest.raises(ValidationError) as e:
        EvalModelOptions(**GOOD, profile="huge")
    assert options_error(e.value) == "unknown --profile 'huge'; known: paper, small"


def test_several_problems_on_one_line():
    with pytest.raises(ValidationError) as e:
        EvalModelOptions(**{**GOOD, "level": 0, "dtype": "int3", "timeout": -1.0})
    assert options_error(e.value) == (
        "--level must be >= 1, got 0; unknown --dtype 'int3'; known: fp32, bf16; --timeout must be > 0, got -1.0"
    )


@pytest.mark.parametrize(
    "extra, words",
    [
        ({"samples": 3, "temperature": 0.0}, "--samples 3 at --temperature 0 gives 3 copies of the greedy answer"),
        ({"engine": "vllm", "static_cache": True}, "--static-cache is an option of --engine hf"),
    ],
)
def test_checks_across_options(extra, words):
    with pytest.raises(ValidationError) as e:
        EvalModelOptions(**GOOD, **extra)
    assert options_error(e.value).startswith(words)


def test_defaults_that_depend_on_other_options():
    one = EvalModelOptions(**GOOD)
    assert one.temperature == 0.0 and one.workers == DEFAULT_WORKERS["cpu"] == 2  # greedy pass@1
    many = EvalModelOptions(**GOOD, samples=4, device="cuda")
    assert many.temperature == SAMPLED_TEMPERATURE and many.workers == DEFAULT_WORKERS["cuda"] == 1
    given = EvalModelOptions(**GOOD, samples=4, temperature=0.3, workers=12)
    assert given.temperature == 0.3 and given.workers == 12


def test_unknown_field_is_refused():
    with pytest.raises(ValidationError, match="bogus"):
        EvalModelOptions(**GOOD, bogus=1)


def test_model_fields_are_the_commands_options():
    """Every option of the command is a field of EvalModelOptions, with the same flag."""
    params = inspect.signature(eval_model_cmd).parameters
    assert list(params) == list(EvalModelOptions.model_fields)
    for name, p in params.items():
        decls = [d for d in p.default.param_decls if d.startswith("--")]
        assert flag(name) in decls or f"{flag(name)}/--no-{flag(name)[2:]}" in decls, (name, decls)
