"""``xbench sanity``: do a model's maps depend on its weights? The model randomisation test of Adebayo et al.
(2018, "Sanity checks for saliency maps").

The layers: every parameter the image forward pass uses (found by watching which parameter tensors the torch
operations of one forward receive, in the order they first do), grouped per block of a stack (a name with a
numeric part, e.g. ``visual.transformer.resblocks.3``), else per leaf module (``visual.conv1``), else per
parameter (``visual.proj``). Text embeddings are computed once before and kept: the test is of the image side.

* ``cascading``: re-initialise the layers from the top (the last used) down, cumulatively;
* ``independent``: re-initialise one layer at a time, the others original.

Re-initialising draws each parameter tensor from a normal distribution with the tensor's own mean and standard
deviation (a constant tensor, such as a fresh LayerNorm, gets the standard deviation max(|mean|, 1)), from a
generator seeded by ``--seed`` and the layer's position, so both modes draw the same values for a layer.

At each step the maps of the same cases are compared with the original ones, per case and class, as the scorer
sees them: resized to 64 x 64 (bilinear, half-pixel centres, contract step 1) and min-max normalised (step 2):

* Spearman rank correlation of the signed maps (pairs where a map is constant are left out), its mean and the
  mean of its absolute value (a map that flips sign keeps its structure);
* SSIM (Wang et al. 2004): Gaussian window sigma 1.5 truncated at 3.5 sigma (11 x 11), K1 = 0.01, K2 = 0.03,
  data range 1, population covariances, averaged over the pixels whose window lies inside the map (what
  ``skimage.metrics.structural_similarity(gaussian_weights=True, use_sample_covariance=False)`` computes).

Verdict: the maps depend on the weights when the mean |Spearman| after the last cascading step (every layer
re-initialised; independent mode: the lowest over layers) is below ``--threshold`` (0.5). A model that uses no
weights at all (the baselines) does not.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np

from xbench.schemas._cli import NOT_WRITTEN_HINT, UserError, command, progress
from xbench.schemas.options import MAX_CASES, Choice, Flag, Float, Int, Text, click_options, opt, parse, seed_opt

COMPARE_GRID = 64
MODES = ("cascading", "independent")


# -- similarity -------------------------------------------------------------------------------------------
def _gaussian_1d(sigma: float, truncate: float) -> np.ndarray:
    r = int(truncate * sigma + 0.5)
    x = np.arange(-r, r + 1, dtype=np.float64)
    k = np.exp(-0.5 * (x / sigma) ** 2)
    return k / k.sum()


def _filter_valid(a: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Separable correlation with ``k``, only where the window lies inside (no padding is ever read)."""
    n = len(k)
    rows = sum(k[i] * a[i:a.shape[0] - n + 1 + i] for i in range(n))
    return sum(k[j] * rows[:, j:a.shape[1] - n + 1 + j] for j in range(n))


def ssim(a: np.ndarray, b: np.ndarray, *, data_range: float = 1.0, sigma: float = 1.5, truncate: float = 3.5,
         k1: float = 0.01, k2: float = 0.03) -> float:
    """Mean SSIM of two 2-D arrays (Wang et al. 2004, Gaussian window), over the pixels whose window fits."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    k = _gaussian_1d(sigma, truncate)
    if min(a.shape) < len(k):
        raise ValueError(f"maps of {a.shape} are smaller than the {len(k)}x{len(k)} window")
    mu_a, mu_b = _filter_valid(a, k), _filter_valid(b, k)
    var_a = _filter_valid(a * a, k) - mu_a ** 2
    var_b = _filter_valid(b * b, k) - mu_b ** 2
    cov = _filter_valid(a * b, k) - mu_a * mu_b
    c1, c2 = (k1 * data_range) ** 2, (k2 * data_range) ** 2
    s = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a ** 2 + mu_b ** 2 + c1) * (var_a + var_b + c2))
    return float(s.mean())


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation (average ranks for ties); NaN when either map is constant."""
    from scipy.stats import rankdata

    ra, rb = rankdata(np.ravel(a)), rankdata(np.ravel(b))
    if ra.std() == 0 or rb.std() == 0:
        return math.nan
    return float(np.corrcoef(ra, rb)[0, 1])


def scorer_view(maps, grid: int = COMPARE_GRID) -> np.ndarray:
    """(..., h, w) raw maps -> (..., grid, grid) float64 as the scorer sees them: bilinear (half-pixel centres,
    edge clamping) to the grid, then min-max normalised (a constant map becomes 0)."""
    import torch
    import torch.nn.functional as F

    t = torch.as_tensor(np.asarray(maps), dtype=torch.float64)
    lead = t.shape[:-2]
    t = F.interpolate(t.reshape(-1, 1, *t.shape[-2:]), size=(grid, grid), mode="bilinear", align_corners=False)
    t = t.reshape(*lead, grid, grid)
    lo = t.amin(dim=(-2, -1), keepdim=True)
    span = t.amax(dim=(-2, -1), keepdim=True) - lo
    return torch.where(span > 0, (t - lo) / torch.where(span > 0, span, 1), 0).numpy()


def compare(original: np.ndarray, other: np.ndarray) -> dict:
    """Mean Spearman, mean |Spearman| and mean SSIM over every (case, class) map pair of (n, C, h, w) arrays."""
    a, b = scorer_view(original), scorer_view(other)
    rho, sims = [], []
    for x, y in zip(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:])):
        rho.append(spearman(x, y))
        sims.append(ssim(x, y))
    rho = np.asarray(rho)
    ok = ~np.isnan(rho)
    mean = lambda v: float(v.mean()) if v.size else None  # noqa: E731
    return {"spearman": mean(rho[ok]), "spearman_abs": mean(np.abs(rho[ok])), "ssim": mean(np.asarray(sims)),
            "n_pairs": int(len(sims)), "n_spearman": int(ok.sum())}


# -- layers -------------------------------------------------------------------------------------------------
def _named_parameters(adapter) -> dict[int, tuple[str, object]]:
    """id -> (name, parameter) of every torch parameter the adapter holds (attributes, lists of modules)."""
    import torch

    found: dict[int, tuple[str, object]] = {}
    for attr, value in vars(adapter).items():
        mods = [(attr, value)] if isinstance(value, torch.nn.Module) else \
            [(f"{attr}.{i}", m) for i, m in enumerate(value)] if isinstance(value, (list, tuple)) else []
        for prefix, m in mods:
            if isinstance(m, torch.nn.Module):
                for name, p in m.named_parameters(prefix=prefix):
                    found.setdefault(id(p), (name, p))
    return found


def _group_key(name: str, leaf_modules: set[str]) -> str:
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part.isdigit() and i > 1:  # a block of a stack (index 1 is the adapter's own list of modules)
            return ".".join(parts[:i + 1])
    owner = ".".join(parts[:-1])
    return owner if owner in leaf_modules else name


def layer_groups(adapter, images, sizes) -> list[tuple[str, list]]:
    """[(layer name, [parameters])] in the order the image forward first uses them (bottom to top)."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_leaves

    params = _named_parameters(adapter)
    order: list[int] = []
    seen: set[int] = set()

    class FirstUse(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            for t in tree_leaves((args, kwargs or {})):
                if isinstance(t, torch.Tensor) and id(t) in params and id(t) not in seen:
                    seen.add(id(t))
                    order.append(id(t))
            return func(*args, **(kwargs or {}))

    with FirstUse():
        adapter(images, sizes)
    leaves = set()
    for attr, value in vars(adapter).items():
        mods = [(attr, value)] if isinstance(value, torch.nn.Module) else \
            [(f"{attr}.{i}", m) for i, m in enumerate(value)] if isinstance(value, (list, tuple)) else []
        for prefix, m in mods:
            if isinstance(m, torch.nn.Module):
                leaves |= {f"{prefix}.{n}" if n else prefix for n, sub in m.named_modules()
                           if not any(True for _ in sub.children())}
    groups: dict[str, list] = {}
    for pid in order:
        name, p = params[pid]
        groups.setdefault(_group_key(name, leaves), []).append(p)
    return list(groups.items())


def randomise(group: list, seed: int, position: int) -> None:
    """Re-initialise a layer's parameters in place (the module docstring's rule)."""
    import torch

    gen = torch.Generator().manual_seed(seed * 1_000_003 + position)
    with torch.no_grad():
        for p in group:
            v = p.detach().float()
            mean = float(v.mean())
            std = float(v.std()) if v.numel() > 1 else 0.0
            std = std if std > 0 else max(abs(mean), 1.0)
            p.copy_((torch.randn(p.shape, generator=gen) * std + mean).to(p.dtype).to(p.device))


# -- the test -------------------------------------------------------------------------------------------------
def _maps(adapter, batches, classes: dict, device) -> list[np.ndarray]:
    """Maps of every batch, (n, C, h, w) float32 each, through the extraction's own compute step."""
    from xbench.extract.pipeline import compute_block

    out = []
    for name, images, sizes in batches:
        adapter.dataset = name
        adapter.set_classes(classes[name])  # text embeddings: computed with the text side, never randomised
        block = compute_block(adapter, images, sizes, batch_size=max(1, images.shape[0]), device=device,
                              precision="fp32")
        out.append(block.result()[1].copy())
    return out


def run_sanity(adapter, images_path, *, limit: int = 8, seed: int = 0, mode: str = "cascading",
               threshold: float = 0.5, device=None, progress_fn=None) -> dict:
    """Run the randomisation test on the first ``limit`` cases of every dataset of ``images_path``."""
    import torch

    from xbench.schemas import read_images

    if mode not in MODES:
        raise UserError(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
    store = read_images(images_path)
    device = torch.device(device or "cpu")
    adapter.to(device)
    classes = {n: tuple(ds.classes) for n, ds in store.datasets.items()}
    batches = []
    for name, ds in sorted(store.datasets.items()):
        n = min(limit, len(ds.case_id))
        batches.append((name, torch.from_numpy(np.ascontiguousarray(ds.image[:n])),
                        torch.from_numpy(np.asarray(ds.orig_size[:n], np.int64))))
    original = _maps(adapter, batches, classes, device)
    first = batches[0]
    adapter.dataset = first[0]
    adapter.set_classes(classes[first[0]])
    groups = layer_groups(adapter, first[1].to(device), first[2])
    saved = [[p.detach().clone() for p in g] for _, g in groups]

    def restore():
        with torch.no_grad():
            for (_, g), values in zip(groups, saved):
                for p, v in zip(g, values):
                    p.copy_(v)

    steps = [{"step": 0, "layer": "none (original weights)", "spearman": 1.0, "spearman_abs": 1.0, "ssim": 1.0}]
    order = list(reversed(range(len(groups)))) if mode == "cascading" else list(range(len(groups)))
    try:
        for k, g in enumerate(order, start=1):
            if mode == "independent":
                restore()
            randomise(groups[g][1], seed, g)
            now = _maps(adapter, batches, classes, device)
            sims = [compare(a, b) for a, b in zip(original, now)]
            n = sum(s["n_pairs"] for s in sims)
            row = {"step": k, "layer": groups[g][0], "n_parameters": int(sum(p.numel() for p in groups[g][1]))}
            for key in ("spearman", "spearman_abs", "ssim"):  # pooled over datasets, weighted by their pairs
                vals = [(s[key], s["n_pairs"]) for s in sims if s[key] is not None]
                row[key] = sum(v * w for v, w in vals) / sum(w for _, w in vals) if vals else None
            row["n_pairs"] = n
            steps.append(row)
            if progress_fn:
                progress_fn(1)
    finally:
        restore()
    measured = [s["spearman_abs"] for s in steps[1:] if s["spearman_abs"] is not None]
    if not groups:
        verdict, why = False, "the maps use no weights"
    elif not measured:
        verdict, why = False, "every randomised map is constant"
    else:
        final = measured[-1] if mode == "cascading" else min(measured)
        verdict = final < threshold
        why = (f"mean |Spearman| {final:.3f} {'<' if verdict else '>='} {threshold} "
               f"{'after randomising every layer' if mode == 'cascading' else 'at the most sensitive layer'}")
    return {"xbench_sanity": 1, "model": getattr(adapter, "name", None) or type(adapter).__name__,
            "method": getattr(adapter, "method", None), "mode": mode, "seed": seed, "limit": limit,
            "threshold": threshold, "compare_grid": [COMPARE_GRID, COMPARE_GRID],
            "datasets": {n: int(b[1].shape[0]) for n, b in zip(sorted(store.datasets), batches)},
            "layers": [name for name, _ in groups], "steps": steps,
            "depends_on_weights": bool(verdict), "verdict": why}


# -- outputs -------------------------------------------------------------------------------------------------
def _fmt(v) -> str:
    return "–" if v is None else f"{v:.3f}"


def table_markdown(result: dict) -> str:
    lines = [f"# Sanity check: {result['model']} ({result['method']}), {result['mode']} randomisation", "",
             f"Maps depend on the weights: **{'yes' if result['depends_on_weights'] else 'no'}** ({result['verdict']}).",
             "", "| Step | Layer re-initialised | Spearman | abs(Spearman) | SSIM |", "|---:|---|---:|---:|---:|"]
    for s in result["steps"]:
        layer = s["layer"].replace("|", "\\|")
        lines.append(f"| {s['step']} | {layer} | {_fmt(s['spearman'])} | {_fmt(s['spearman_abs'])} | {_fmt(s['ssim'])} |")
    return "\n".join(lines) + "\n"


def table_csv(result: dict) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["step", "layer", "spearman", "spearman_abs", "ssim"])
    for s in result["steps"]:
        w.writerow([s["step"], s["layer"], *("" if s[k] is None else repr(float(s[k])) for k in ("spearman", "spearman_abs", "ssim"))])
    return buf.getvalue()


def figure(result: dict, path_stem: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = result["steps"]
    x = [s["step"] for s in steps]
    fig, ax = plt.subplots(figsize=(max(5, 0.45 * len(steps) + 2), 3.6))
    for key, label in (("spearman_abs", "|Spearman|"), ("ssim", "SSIM")):
        ax.plot(x, [np.nan if s[key] is None else s[key] for s in steps], marker="o", label=label)
    ax.axhline(result["threshold"], color="grey", lw=0.8, ls="--")
    ax.set_xticks(x)
    ax.set_xticklabels([s["layer"].split(".", 1)[-1] if s["step"] else "original" for s in steps], rotation=60,
                       ha="right", fontsize=7)
    ax.set_ylim(-0.05, 1.05)
    ax.set_ylabel("similarity to the original maps")
    ax.set_title(f"{result['model']} ({result['method']}): {result['mode']} randomisation", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    files = []
    for ext in ("png", "svg"):
        p = path_stem.with_suffix(f".{ext}")
        fig.savefig(p, dpi=120)
        files.append(p)
    plt.close(fig)
    return files


def write_outputs(result: dict, out: Path) -> Path:
    """sanity.json, sanity.md, sanity.csv, sanity.png/.svg into ``out``, built beside it and renamed in whole."""
    out = Path(out)
    if out.exists():
        raise UserError(f"--out {out}: already exists; remove it or choose another")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        (tmp / "sanity.json").write_text(json.dumps(result, indent=1))
        (tmp / "sanity.md").write_text(table_markdown(result))
        (tmp / "sanity.csv").write_text(table_csv(result))
        figure(result, tmp / "sanity")
        os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


@dataclass(kw_only=True)
class SanityOptions:
    """What ``xbench sanity`` takes (the fields are its options)."""

    model: str = opt(check=Text(), required=True,
                     help='Registered model name or model config file (as xbench-extract).')
    images: Path = opt(check=Text(click.Path(path_type=Path)), required=True, help='images.zarr to take cases from.')
    out: Path = opt(check=Text(click.Path(path_type=Path)), required=True,
                    help='Folder to write (must not exist): sanity.json, sanity.md, sanity.csv, '
                         'sanity.png/.svg.')
    method: str | None = opt(None, check=Text(), help="Saliency method (default: the model's own).")
    limit: int = opt(8, check=Int(1, MAX_CASES), help='Cases per dataset.')
    seed: int = seed_opt(help='Seed of the re-initialised weights.')
    mode: str = opt('cascading', check=Choice(MODES),
                    help='cascading: top layer down, cumulatively; independent: one layer at a time.')
    threshold: float = opt(0.5, check=Float(0, 1),
                           help='Maps depend on the weights when mean |Spearman| falls below this.')
    device: str | None = opt(None, check=Text(), help='torch device (default: cuda when available, else cpu).')
    quiet: bool = opt(False, check=Flag(), short='-q', help='No progress and no summary line.')
    as_json: bool = opt(False, check=Flag(), flag='--json', help='Print sanity.json on stdout.')


@command("sanity", on_interrupt=NOT_WRITTEN_HINT)
@click_options(SanityOptions)
def sanity(**params):
    """The model randomisation test (Adebayo et al. 2018): how similar do the maps stay as the weights
    are re-initialised, layer by layer? Writes a table and a figure, and says whether the maps depend
    on the weights. The rule is in the module docstring of xbench/extract/sanity.py and docs/how-to/sanity.md.

    \b
    Example:
      xbench sanity --model clip-tiny --images images.zarr --out sanity/clip-tiny --limit 4
    """
    o = parse(SanityOptions, params)
    (model, images, out, method, limit, seed, mode, threshold, device, quiet, as_json) = (
        o.model, o.images, o.out, o.method, o.limit, o.seed, o.mode, o.threshold, o.device, o.quiet, o.as_json)
    from xbench.schemas._cli import require_kind

    from xbench.extract.models import create_adapter
    from xbench.extract.runner import pick_device

    require_kind(images, "images", "--images")
    if Path(out).exists():
        raise UserError(f"--out {out}: already exists; remove it or choose another")
    adapter = create_adapter(model, **({"method": method} if method else {}))
    bar = progress(None, desc="sanity", unit="layer", enabled=not (quiet or as_json))
    try:
        result = run_sanity(adapter, images, limit=limit, seed=seed, mode=mode, threshold=threshold,
                            device=pick_device(device, 0), progress_fn=bar.update)
    finally:
        bar.close()
    result["model"] = str(getattr(adapter, "config", {}).get("name") or model)
    write_outputs(result, out)
    if as_json:
        click.echo(json.dumps(result, indent=1))
    elif not quiet:
        click.echo(f"{result['model']}: maps {'depend' if result['depends_on_weights'] else 'do NOT depend'} on the "
                   f"weights ({result['verdict']}); wrote {out}")
