"""``xbench build-embeddings``: compute the MedKLIP / MAVL query-embedding cache once, offline.

MedKLIP and MAVL encode their entity descriptions (and MAVL its visual-aspect sentences) with
Bio_ClinicalBERT when the model is constructed; those embeddings are not in the checkpoints.
This command computes them from a local text-encoder folder and the official description files
that ship with the authors' repositories, and writes the ``.npz`` cache the adapters read
(``embeddings_cache:`` in the model config).
"""
from __future__ import annotations

import json

import click

from xbench.schemas._cli import NOT_WRITTEN_HINT, UserError, command, progress


def run_build(text_encoder: str, descriptions: str, out: str, *, aspects: str | None = None,
              extra_entities: tuple[str, ...] = (), max_length: int = 64, lower_case: bool = True,
              device: str = "cpu", quiet: bool = False) -> dict:
    """Build the cache and return a summary dict (path, entity and aspect counts, dimension)."""
    from .cache import build_query_cache
    from .entities import ENTITIES

    total = len(ENTITIES) + len(extra_entities)
    n_texts = total * (1 + (8 if aspects else 0))
    bar = progress(n_texts, desc="encoding", unit="text", enabled=not quiet)
    try:
        cache = build_query_cache(text_encoder, descriptions, out, aspects_path=aspects,
                                  extra_entities=extra_entities, max_length=max_length, lower_case=lower_case,
                                  device=device, progress=bar.update)
    finally:
        bar.close()
    return {"cache": str(out), "entities": len(cache.entities), "dim": int(cache.disease_book.shape[1]),
            "aspects": list(cache.aspects)}


@command("build-embeddings", on_interrupt=NOT_WRITTEN_HINT)
@click.option("--text-encoder", required=True, type=click.Path(exists=True, file_okay=False),
              help="Local Hugging Face folder of the text encoder (Bio_ClinicalBERT: config.json, weights, vocab.txt).")
@click.option("--descriptions", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The official entity descriptions, a JSON object entity -> text "
                   "(MedKLIP's 'observation explanation.json').")
@click.option("--aspects", type=click.Path(exists=True, dir_okay=False), default=None,
              help="MAVL only: JSON object entity -> list of aspect sentences (MAVL's gpt4_mimic.json).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Cache file to write (.npz).")
@click.option("--extra-entity", "extra_entities", multiple=True,
              help="Entity beyond the 75 (e.g. covid19); it must have texts in the JSON files. Repeatable.")
@click.option("--max-length", default=64, show_default=True, help="Token length used upstream.")
@click.option("--cased", is_flag=True, help="Do not lower-case (upstream lower-cases).")
@click.option("--device", default="cpu", show_default=True, help="Torch device for the text encoder.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def build_embeddings(text_encoder, descriptions, aspects, out, extra_entities, max_length, cased, device, quiet,
                     as_json):
    """Build the entity (MedKLIP) or entity + aspect (MAVL) embedding cache.

    \b
    Example:
      xbench build-embeddings --text-encoder ~/models/Bio_ClinicalBERT \\
          --descriptions "MedKLIP/.../observation explanation.json" --out ~/xbench/medklip_queries.npz
      xbench build-embeddings --text-encoder ~/models/Bio_ClinicalBERT \\
          --descriptions "MAVL/Zero-shot_classification/observation explanation.json" \\
          --aspects MAVL/Pretrain/concept_gen/gpt4_mimic.json --out ~/xbench/mavl_queries.npz
    """
    from ..errors import ModelConfigError

    try:
        summary = run_build(text_encoder, descriptions, out, aspects=aspects, extra_entities=tuple(extra_entities),
                            max_length=max_length, lower_case=not cased, device=device, quiet=quiet)
    except (ValueError, ModelConfigError, OSError) as exc:  # bad files or texts: invalid input, one line each
        raise UserError(str(exc).splitlines() or [type(exc).__name__]) from None
    if as_json:
        click.echo(json.dumps(summary))
    elif not quiet:
        click.echo(f"wrote {summary['cache']}: {summary['entities']} entities x {summary['dim']}-d"
                   + (f", aspects {', '.join(summary['aspects'])}" if summary["aspects"] else ""))


main = build_embeddings

if __name__ == "__main__":  # pragma: no cover
    main()
