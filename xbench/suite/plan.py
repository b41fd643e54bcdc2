"""The plan: a suite's steps in the order they run, ``--only``'s selection, and each step's state now
(skip, resume, run or wait) from its fingerprint and the run record."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from xbench.suite.fingerprint import DigestCache, _hash, canonical_specs, model_digest, path_digests, tree_digest
from xbench.suite.parse import (EXTRACT_DEFAULTS, EXTRACT_FINGERPRINT_WHEN_SET, EXTRACT_NOT_IN_OUTPUT, SCORE_DEFAULTS,
                                SCORE_PATHS, ModelEntry, Suite, SuiteError, _grid)

STEP_KINDS = ("prepare", "extract", "score", "report")

@dataclass
class Step:
    kind: str                 # prepare | extract | score | report
    key: str                  # dataset or model key ("" for the report)
    deps: list[str]           # ids of the steps whose outputs this one reads
    options: dict             # what shapes the output (hashed into the fingerprint)
    outputs: list[str]        # paths under the run folder, relative

    @property
    def id(self) -> str:
        return f"{self.kind}/{self.key}" if self.key else self.kind



def _extract_fingerprinted(m: "ModelEntry") -> dict:
    """The extraction options that shape a model's submission: specs canonical, a later option only when set (an
    empty ``augment`` is no augmentation), so a suite without them keeps its fingerprints."""
    out = {}
    for k, v in m.extract.items():
        if k in EXTRACT_NOT_IN_OUTPUT:
            continue
        if k == "augment" and v is not None:
            v = canonical_specs("augment", v) or None
        if k in EXTRACT_FINGERPRINT_WHEN_SET and v == EXTRACT_DEFAULTS[k]:
            continue
        out[k] = v
    return out


def _score_options(suite: Suite, ds_keys: list[str]) -> dict:
    """A score step's options (:class:`~xbench.score.options.ScoreOptions` fields): the suite's bootstrap,
    seed and datasets, and each other key of its ``score:`` section only when it differs from its default, so
    a suite without them keeps the fingerprints it had before they were suite keys."""
    later = {k: (list(v) if isinstance(v, tuple) else v) for k, v in suite.score.items()
             if k != "bootstrap" and v != SCORE_DEFAULTS[k]}
    return {"bootstrap": suite.score["bootstrap"], "seed": suite.seed, "datasets": ds_keys, **later}


def plan_steps(suite: Suite, limit: int | None = None) -> list[Step]:
    """The steps of a suite in the order they run (each after the steps it depends on)."""
    steps: list[Step] = []
    ds_keys = [d.key for d in suite.datasets]
    for d in suite.datasets:
        opts = {"dataset": d.key, "split": d.split, "options": d.options, "limit": limit,
                **{k: (list(_grid(v)) if k == "grid" else canonical_specs("perturb", v) if k == "perturb" else v)
                   for k, v in d.prepare.items()
                   if k != "workers" and (d.prepare.get("perturb") or not k.startswith("perturb"))}}  # old fingerprints stay
        steps.append(Step("prepare", d.key, [], opts, [f"data/images.zarr/{d.key}", f"data/gt.zarr/{d.key}"]))
    for m in suite.models:
        if m.submission is not None:  # precomputed: scored as it is (its content digest is the score step's input)
            steps.append(Step("score", m.key, [f"prepare/{k}" for k in ds_keys],
                              {**_score_options(suite, ds_keys), "submission": m.submission}, [f"scores/{m.key}"]))
            continue
        overrides = m.options
        if isinstance(overrides, dict) and overrides.get("augment") is not None:  # a model config's augment: too
            overrides = {**overrides, "augment": canonical_specs("augment", overrides["augment"])}
        opts = {"model": m.model, "overrides": overrides, "datasets": ds_keys, **_extract_fingerprinted(m)}
        steps.append(Step("extract", m.key, [f"prepare/{k}" for k in ds_keys], opts, [f"submissions/{m.key}.zarr"]))
        steps.append(Step("score", m.key, [f"extract/{m.key}", *(f"prepare/{k}" for k in ds_keys)],
                          _score_options(suite, ds_keys), [f"scores/{m.key}"]))
    steps.append(Step("report", "", [f"score/{m.key}" for m in suite.models]
                      + [f"extract/{m.key}" for m in suite.models if m.submission is None],
                      {**suite.report, "title": suite.title, "seed": suite.seed, "models": [m.key for m in suite.models]},
                      ["report"]))
    return steps


def select_steps(steps: Sequence[Step], only: Sequence[str]) -> set[str]:
    """Ids matched by ``--only`` patterns: a step id, a kind (``extract``) or a glob (``score/clip*``)."""
    if not only:
        return {s.id for s in steps}
    chosen, problems = set(), []
    for pattern in only:
        hit = {s.id for s in steps if s.id == pattern or s.kind == pattern or fnmatch.fnmatchcase(s.id, pattern)}
        if not hit:
            problems.append(f"--only {pattern}: matches no step; steps: {', '.join(s.id for s in steps)}")
        chosen |= hit
    if problems:
        raise SuiteError(problems)
    return chosen



@dataclass
class StepState:
    status: str          # skip | resume | run | wait (an input will change first)
    reason: str
    fingerprint: str | None = None


def _input_digests(step: Step, done: Mapping[str, dict]) -> dict | None:
    """What a step reads, as the content digests of the outputs of its dependencies; None while one
    of them is not finished."""
    out = {}
    for dep in step.deps:
        rec = done.get(dep)
        if rec is None:
            return None
        digests = rec["output_digest"]
        if dep.startswith("prepare/") and step.kind == "extract":
            digests = {"images": digests["images"]}  # extraction never reads the ground truth
        out[dep] = digests
    return out



def _output_digest(step: Step, run_dir: Path, cache: DigestCache) -> dict | str | None:
    if step.kind == "prepare":
        images, gt = (tree_digest(run_dir / o, cache) for o in step.outputs)
        return None if images is None or gt is None else {"images": images, "gt": gt}
    return tree_digest(run_dir / step.outputs[0], cache)


def evaluate(steps: Sequence[Step], record: Mapping, run_dir: Path, cache: DigestCache,
             roots: Mapping[str, str | None]) -> dict[str, StepState]:
    """For each step: skip (done, inputs and output unchanged), resume, run, or wait for an input."""
    recorded = record.get("steps", {})
    done: dict[str, dict] = {}
    states: dict[str, StepState] = {}
    for s in steps:
        if s.kind == "prepare":
            inputs = {"root": roots.get(s.key)}
        else:
            inputs = _input_digests(s, done)
            if inputs is not None and s.kind == "extract":
                inputs["model"] = model_digest(s.options["model"], s.options["overrides"], cache)
            if inputs is not None and s.options.get("submission"):  # a precomputed submission: by its content
                inputs["submission"] = tree_digest(s.options["submission"], cache)
            named = path_digests(s.options, SCORE_PATHS, cache) if inputs is not None and s.kind == "score" else {}
            if named:  # thresholds_from, human_dir, ...: by content (only when set: other suites keep their fingerprints)
                inputs["paths"] = named
        if inputs is None:
            pending = [d for d in s.deps if d not in done]
            more = f" and {len(pending) - 1} more" if len(pending) > 1 else ""
            states[s.id] = StepState("wait", f"after {pending[0]}{more}")
            continue
        fp = _hash({"kind": s.kind, "key": s.key, "options": s.options, "inputs": inputs})
        rec = recorded.get(s.id) or {}
        same = rec.get("fingerprint") == fp
        if same and rec.get("status") == "done":
            now = _output_digest(s, run_dir, cache)
            if now is not None and now == rec.get("output_digest"):
                states[s.id] = StepState("skip", "done; inputs, options and output unchanged", fp)
                done[s.id] = rec
                continue
            why = "output missing" if now is None else "output changed since it was written"
            states[s.id] = StepState("run", why, fp)
        elif same and rec.get("status") == "started":
            states[s.id] = StepState("resume", "interrupted; resuming", fp)
        elif rec:
            states[s.id] = StepState("run", "inputs or options changed", fp)
        else:
            states[s.id] = StepState("run", "first run", fp)
    return states



def evaluate_one(step: Step, steps: Sequence[Step], record: Mapping, run_dir: Path, cache: DigestCache,
                 roots: Mapping) -> StepState:
    """The state of one step now (its inputs may have just been written by earlier steps)."""
    upto = list(steps[: steps.index(step) + 1])
    return evaluate(upto, record, run_dir, cache, roots)[step.id]
