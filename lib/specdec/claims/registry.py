"""The API check registry: what a check is, how one runs, and what checks share.

Each API-shaped claim of the article is *executed* against the installed vLLM (construct
``SpeculativeConfig`` / ``SamplingParams`` / ``EngineArgs``, import names, look for
executables, read vLLM's own source). No weights and no engine are needed: models are
``config.json`` files under ``data/model_configs/``. The checks themselves are in
:mod:`specdec.claims.checks`; their stored results in :mod:`specdec.claims.checkio`.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import re
import typing
from pathlib import Path
from typing import Any, Callable

#: Outcomes of one check. "ignored": vLLM accepts the value but discards it.
OUTCOMES = ("accepted", "rejected", "ignored", "present", "missing")

#: The article's target (C3, C7-C9), as a config-only model.
TARGET_CONFIG = "llama-3-8b"


@dataclasses.dataclass(frozen=True)
class Check:
    id: str
    claims: tuple[str, ...]
    description: str
    call: str  # the call as a reader would type it
    real_api: str  # what does the job in real vLLM
    fn: Callable[["Context"], "Result"]

    def spec(self) -> dict[str, Any]:
        """What the check is (hashed into ``config_hash``): change the call, change the hash."""
        return {"id": self.id, "claims": list(self.claims), "call": self.call,
                "source": inspect.getsource(self.fn)}


@dataclasses.dataclass
class Result:
    outcome: str
    exception_type: str | None = None
    exception_message: str | None = None
    error_summary: str | None = None
    observed: dict[str, Any] = dataclasses.field(default_factory=dict)
    vllm_source: str | None = None


CHECKS: list[Check] = []


def check(id: str, claims: str, description: str, call: str, real_api: str = ""):
    def deco(fn):
        CHECKS.append(Check(id, tuple(claims.split()), description, call, real_api, fn))
        return fn
    return deco


def _exc_type(e: BaseException) -> str:
    t = type(e)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _error_summary(e: BaseException) -> str:
    """A short, machine-independent summary (pydantic errors: field + message per error)."""
    errors = getattr(e, "errors", None)
    if callable(errors):
        try:
            return "; ".join(f"{'.'.join(map(str, err.get('loc', ()))) or '<root>'}: "
                             f"{err.get('msg')}" for err in errors())
        except Exception:  # noqa: BLE001 - not a pydantic error after all
            pass
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def attempt(fn: Callable[[], Any], observe: Callable[[Any], dict] | None = None,
            source: str | None = None) -> Result:
    """Run ``fn``; "accepted" with what ``observe`` reads off the result, or "rejected"."""
    try:
        value = fn()
    except Exception as e:  # noqa: BLE001 - recording the exception is the point
        return Result("rejected", _exc_type(e), str(e), _error_summary(e), vllm_source=source)
    return Result("accepted", observed=observe(value) if observe else {}, vllm_source=source)


class Context:
    """What the checks share: the vLLM under test and the config-only models."""

    def __init__(self, model_configs: Path):
        import vllm

        self.vllm = vllm
        self.vllm_dir = Path(vllm.__file__).parent
        self.model_configs = Path(model_configs)
        self._target = None
        self._sources: dict[Path, str] | None = None

    def model_dir(self, name: str) -> str:
        d = self.model_configs / name
        if not (d / "config.json").is_file():
            raise FileNotFoundError(f"{d / 'config.json'} does not exist")
        return str(d)

    def vocab(self, name: str) -> int:
        cfg = json.loads((Path(self.model_dir(name)) / "config.json").read_text())
        return int(cfg.get("vocab_size") or cfg["text_config"]["vocab_size"])

    def target_model_config(self):
        """vLLM's ModelConfig of the Llama-3-8B target, from config.json only (no weights)."""
        if self._target is None:
            from vllm.config import ModelConfig

            self._target = ModelConfig(model=self.model_dir(TARGET_CONFIG),
                                       skip_tokenizer_init=True, max_model_len=2048)
        return self._target

    def spec(self, tp: int = 1, **kw):
        """SpeculativeConfig against the target at tensor parallel size ``tp``."""
        from vllm.config import ParallelConfig, SpeculativeConfig

        return SpeculativeConfig(target_model_config=self.target_model_config(),
                                 target_parallel_config=ParallelConfig(tensor_parallel_size=tp),
                                 **kw)

    def rel(self, obj_or_path) -> str:
        """Source path of a vLLM object (``vllm/...py:line``), as the pinned wheel has it."""
        if isinstance(obj_or_path, (str, Path)):
            p, line = Path(obj_or_path), None
        else:
            p = Path(inspect.getsourcefile(obj_or_path))
            try:
                line = inspect.getsourcelines(obj_or_path)[1]
            except (OSError, TypeError):
                line = None
        rel = "vllm/" + p.resolve().relative_to(self.vllm_dir.resolve()).as_posix()
        return f"{rel}:{line}" if line else rel

    def sources(self) -> dict[Path, str]:
        """vLLM's installed Python files and their text, read once (several checks grep them)."""
        if self._sources is None:
            self._sources = {f: f.read_text(errors="ignore")
                             for f in sorted(self.vllm_dir.rglob("*.py"))}
        return self._sources

    def grep(self, pattern: str) -> dict[str, int]:
        """``{vllm/relative/path.py: count}`` of a regex in vLLM's installed Python source."""
        rx = re.compile(pattern)
        hits: dict[str, int] = {}
        for f, text in self.sources().items():
            n = len(rx.findall(text))
            if n:
                hits[self.rel(f)] = n
        return hits


def spec_fields() -> list[str]:
    """Field names of the installed vLLM's ``SpeculativeConfig``."""
    from vllm.config import SpeculativeConfig

    try:
        return sorted(f.name for f in dataclasses.fields(SpeculativeConfig))
    except TypeError:  # not a (pydantic) dataclass in this version
        return sorted(getattr(SpeculativeConfig, "__pydantic_fields__", {}))


def literal_values(cls, field_name: str) -> list[str]:
    """Values of a ``Literal[...]`` field annotation (nested Literals flattened)."""
    pyd = getattr(cls, "__pydantic_fields__", {}).get(field_name)  # resolved by pydantic
    if pyd is not None:
        hint = pyd.annotation
    else:
        try:
            hint = typing.get_type_hints(cls).get(field_name)
        except Exception:  # noqa: BLE001 - unresolvable forward references
            hint = None

    def walk(tp):
        if typing.get_origin(tp) is typing.Literal:
            for a in typing.get_args(tp):
                yield from walk(a) if not isinstance(a, str) else [a]
        else:
            for a in typing.get_args(tp):
                yield from walk(a)
    return sorted(set(walk(hint))) if hint is not None else []


def _spec_cls():
    from vllm.config import SpeculativeConfig
    return SpeculativeConfig


def _membership(ctx: Context, key: str) -> Result:
    from vllm.config import SpeculativeConfig

    present = key in spec_fields()
    return Result("present" if present else "missing",
                  observed={"field": key, "in SpeculativeConfig fields": present},
                  vllm_source=ctx.rel(SpeculativeConfig))
