"""A profile: the pass-time model's parameters, where they came from, and how well they fit.

A *measured* profile holds timed samples (``Sample``) and the ``LinearPassModel``
fitted to them, with the fit error per pass kind; a *modeled* one holds
``RooflineInputs``. Both save to and load from one JSON file, so every figure
computed from a profile traces back to its inputs.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import reprlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from densegate.impl.figures import percentile
from densegate.impl.validation import check_positive_float, int_problem, json_value, number_problem
from densegate.lab.cost.model import (
    FEATURES,
    KINDS,
    LinearPassModel,
    PassModel,
    PassWork,
)
from densegate.lab.cost.roofline import GPUS, LAUNCH_US, SHAPES, RooflineInputs, RooflineModel

__all__ = ["FORMAT", "KIND_FEATURES", "Profile", "Sample", "fit", "fit_error", "roofline_profile"]

FORMAT = "densegate-profile-1"

KIND_FEATURES: dict[str, tuple[str, ...]] = {
    "prefill": ("base", "prefill_tokens", "prefill_chunks", "prefill_pairs"),
    "mixed": FEATURES,
    "decode_eager": ("base", "decode_seqs", "decode_context"),
    "decode_graph": ("base", "decode_seqs", "decode_context"),
}
"""The features each kind's fit may use (the rest of its coefficients are 0)."""


@dataclass(frozen=True)
class Sample:
    """One timed pass: its kind as the runner ran it, its work, and milliseconds."""

    kind: str
    work: PassWork
    ms: float

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Sample.kind must be one of {KINDS}, got {self.kind!r}")
        check_positive_float("Sample", "ms", self.ms)


def _nonneg_lstsq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0 (Lawson-Hanson active set)."""
    n = a.shape[1]
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    for _ in range(3 * n + 10):
        grad = a.T @ (b - a @ x)
        candidates = np.where(~passive & (grad > 1e-12))[0]
        if candidates.size == 0:
            break
        passive[candidates[np.argmax(grad[candidates])]] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if np.all(z[passive] > 0):
                x = z
                break
            neg = passive & (z <= 0)
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > 1e-15
    return x


def fit(samples: Sequence[Sample], graph_max_rows: int = 0, collective_ms: float = 0.0
        ) -> LinearPassModel:  # fmt: skip
    """Fit each kind's coefficients to its samples, minimizing the relative error.

    Coefficients are kept >= 0 (a pass never gets cheaper by doing more), and each
    kind uses only ``KIND_FEATURES[kind]``. Raises if a kind the model needs has
    fewer samples than features.
    """
    coefs: dict[str, list[float]] = {}
    for kind in KINDS:
        mine = [s for s in samples if s.kind == kind]
        cols = [FEATURES.index(f) for f in KIND_FEATURES[kind]]
        if not mine:
            continue
        if len(mine) < len(cols):
            raise ValueError(
                f"pass kind {kind!r} has {len(mine)} samples, needs >= {len(cols)} to fit"
            )
        x = np.array([[s.work.features()[c] for c in cols] for s in mine])
        y = np.array([s.ms for s in mine])
        # Divide each row by its time: the fit then weighs a 1 ms and a 100 ms pass alike.
        scale = x.max(axis=0)
        scale[scale == 0] = 1.0
        sol = _nonneg_lstsq(x / scale / y[:, None], np.ones(len(mine))) / scale
        full = [0.0] * len(FEATURES)
        for c, v in zip(cols, sol, strict=True):
            full[c] = float(v)
        coefs[kind] = full
    return LinearPassModel(coefs, graph_max_rows, collective_ms)


def fit_error(model: PassModel, samples: Sequence[Sample]) -> dict[str, dict[str, float]]:
    """Per kind: samples, median and max absolute error in percent, and in ms."""
    out: dict[str, dict[str, float]] = {}
    for kind in KINDS:
        mine = [s for s in samples if s.kind == kind]
        if not mine:
            continue
        pct = [100 * abs(model.pass_ms(s.work) - s.ms) / s.ms for s in mine]
        ms = [abs(model.pass_ms(s.work) - s.ms) for s in mine]
        out[kind] = {
            "samples": len(mine),
            "median_abs_pct": percentile(pct, 50) or 0.0,
            "max_abs_pct": max(pct),
            "median_abs_ms": percentile(ms, 50) or 0.0,
        }
    return out


@dataclass
class Profile:
    """The model's parameters and their provenance; ``source`` is "measured" or "modeled"."""

    name: str
    source: str
    inputs: dict[str, Any]
    model: LinearPassModel | RooflineModel
    samples: list[Sample] = field(default_factory=list)
    fit_error: dict[str, dict[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.source not in ("measured", "modeled"):
            raise ValueError(f"Profile.source must be measured or modeled, got {self.source!r}")

    @property
    def graph_max_rows(self) -> int:
        return self.model.graph_max_rows

    def describe(self) -> list[str]:
        """Where the figures come from, one line each."""
        if isinstance(self.model, RooflineModel):
            return [f"profile {self.name} (modeled: roofline)", *self.model.inputs.describe()]
        lines = [f"profile {self.name} (fitted to {len(self.samples)} timed passes)"]
        lines.append(", ".join(f"{k} {v}" for k, v in self.inputs.items()))
        for kind, e in self.fit_error.items():
            lines.append(
                f"fit {kind}: {e['samples']:.0f} passes, median error {e['median_abs_pct']:.1f}%, "
                f"max {e['max_abs_pct']:.1f}%"
            )
        return lines

    def to_json(self) -> dict[str, Any]:
        m = self.model
        model: dict[str, Any]
        if isinstance(m, RooflineModel):
            model = {"form": "roofline", "inputs": m.inputs.as_dict()}
        else:
            model = {
                "form": "linear",
                "features": list(FEATURES),
                "coefficients_ms": {k: list(v) for k, v in m.coefficients.items()},
                "graph_max_rows": m.graph_max_rows,
                "collective_ms": m.collective_ms,
            }
        return {
            "format": FORMAT,
            "name": self.name,
            "source": self.source,
            "inputs": self.inputs,
            "model": model,
            "fit_error": self.fit_error,
            "samples": [[s.kind, s.work.as_list(), s.ms] for s in self.samples],
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n")

    @classmethod
    def from_json(cls, d: object) -> Profile:
        """A profile from its JSON; ``ValueError`` naming the first field that is wrong (a
        negative or NaN coefficient too: it would model negative or empty times)."""
        if not isinstance(d, dict):
            raise ValueError(f"a profile is a JSON object, got a {type(d).__name__}")
        if d.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file (format {d.get('format')!r})")
        m = _typed(d, "model", dict)
        model: LinearPassModel | RooflineModel
        form = m.get("form")
        if form == "roofline":
            model = RooflineModel(RooflineInputs.from_dict(_typed(m, "inputs", dict)))
        elif form == "linear":
            if _typed(m, "features", list) != list(FEATURES):
                raise ValueError(f"profile features {m['features']} are not {list(FEATURES)}")
            coefs = _typed(m, "coefficients_ms", dict)
            rows, coll = m.get("graph_max_rows"), m.get("collective_ms")
            for why in (
                int_problem("model.graph_max_rows", rows, 0),
                number_problem("model.collective_ms", coll, minimum=0.0),
            ):
                if why is not None:
                    raise ValueError(why)
            kinds = {k: tuple(_typed(coefs, k, list)) for k in coefs}
            model = LinearPassModel(kinds, rows, float(coll))
        else:
            raise ValueError(f"unknown model form {form!r}")
        samples = []
        for i, row in enumerate(_typed(d, "samples", list)):
            if not isinstance(row, list) or len(row) != 3:
                raise ValueError(f"sample {i} must be [kind, work, ms], got {reprlib.repr(row)}")
            kind, work, ms = row
            samples.append(Sample(kind, PassWork.from_list(work), ms))
        name, source = _typed(d, "name", str), _typed(d, "source", str)
        inputs, errors = _typed(d, "inputs", dict), _typed(d, "fit_error", dict)
        return cls(name, source, inputs, model, samples, errors)

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        """A saved profile, or a shipped roofline by name (``roofline:H100-SXM``), its
        launch cost optionally scaled (``roofline:H100-SXM,launch=3``: 3x ``launch_us``)."""
        text = str(path)
        if text.startswith("roofline:"):
            gpu, _, extra = text.split(":", 1)[1].partition(",")
            if not extra:
                return roofline_profile(gpu)
            key, _, value = extra.partition("=")
            try:
                scale = float(value)
            except ValueError:
                scale = -1.0
            if key != "launch" or not 0 < scale <= 100:
                raise ValueError(f"{extra!r}: the one roofline option is launch=X, X in (0, 100]")
            prof = roofline_profile(gpu, launch_us=LAUNCH_US * scale)
            return dataclasses.replace(prof, name=f"{prof.name}-launch{scale:g}x")
        if not Path(path).exists():
            raise ValueError(_not_a_profile(text))
        try:
            return cls.from_json(json_value(Path(path).read_text(encoding="utf-8"), str(path)))
        except UnicodeDecodeError as e:
            raise ValueError(f"not UTF-8 text ({e.reason} at byte {e.start})") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"not valid JSON ({e})") from None
        except (KeyError, TypeError) as e:
            raise ValueError(f"{path}: malformed profile ({e!r})") from e


def _not_a_profile(text: str) -> str:
    """No such file: the shipped rooflines named, the closest first (``H100`` is a GPU's
    name, not a file: ``roofline:H100-SXM``)."""
    close = [g for g in GPUS if g.lower().startswith(text.lower())]
    close = close or difflib.get_close_matches(text, list(GPUS), n=1, cutoff=0.4)
    hint = f"; did you mean roofline:{close[0]}?" if close else ""
    names = ", ".join(f"roofline:{g}" for g in GPUS)
    return f"no profile file {text!r}{hint} (shipped rooflines: {names})"


def _typed(d: dict[str, Any], key: str, kind: type) -> Any:
    """``d[key]``, which must be a ``kind`` (a JSON object, list or string)."""
    value = d.get(key)
    if not isinstance(value, kind):
        names: dict[type, str] = {dict: "an object", list: "a list", str: "a string"}
        what = names.get(kind, kind.__name__)
        raise ValueError(f"{key} must be {what}, got {reprlib.repr(value)}")
    return value


def roofline_profile(gpu: str, shape: str = "llama-3.1-8b", **assumptions: Any) -> Profile:
    """The modeled profile of a shipped GPU class and model shape."""
    if gpu not in GPUS:
        raise ValueError(f"unknown GPU class {gpu!r}; shipped: {', '.join(GPUS)}")
    if shape not in SHAPES:
        raise ValueError(f"unknown model shape {shape!r}; shipped: {', '.join(SHAPES)}")
    inputs = RooflineInputs(GPUS[gpu], SHAPES[shape], **assumptions)
    return Profile(
        f"roofline-{gpu}-{shape}",
        "modeled",
        {"gpu": gpu, "shape": shape},
        RooflineModel(inputs),
    )
