"""``xbench compare RESULTS HUMAN_DIR``: a model against the human row, paired by (case, class)."""
from __future__ import annotations

from xbench.score.sections.human.reading import load_human
from xbench.score.sections.human.section import human_block
from xbench.score.sections.human.tables import human_csv, human_markdown, human_rows

def compare_human(a_dir, human_dir, *, bootstrap: int, seed: int, per_class: bool, out_csv, quiet: bool,
                  as_json: bool) -> int:
    """``xbench compare RESULTS HUMAN_DIR``: the model of RESULTS against the human row, paired by (case, class)."""
    import json

    import click

    from xbench.schemas._cli import UserError

    from xbench.score.report._load import ReportInputError, load_results

    try:
        (a,) = load_results([a_dir])
    except ReportInputError as err:
        raise UserError(err.problems) from None
    source = load_human(human_dir)
    if a.counts is None:
        raise UserError(f"{a_dir}: no pair_counts.npz; the paired comparison with the human row needs it")
    block = human_block(a.metrics, a.counts, source, bootstrap=bootstrap, seed=seed)
    if not block["datasets"]:
        raise UserError(f"{a_dir} and {human_dir} share no dataset")
    rows = human_rows(block, per_class=per_class)
    if out_csv is not None:
        from xbench.score.report._files import write_csv_outside

        write_csv_outside(out_csv, human_csv(rows), (a_dir, human_dir), what="the compared folder")
    if as_json:
        click.echo(json.dumps({"a": a.name, "b": "human", "n_boot": bootstrap, "seed": seed, "rows": rows}, indent=2))
    elif not quiet:
        click.echo(human_markdown(rows).rstrip("\n"))
    return 0
