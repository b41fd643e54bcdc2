"""The offline Hugging Face cache, as every adapter reads it: a repository's folder or one of its files,
never a download. torch-free (the CLI's preflight checks use it)."""
from __future__ import annotations

from pathlib import Path

from xbench.extract.models.errors import WeightsNotFoundError

__all__ = ["cached_file", "snapshot"]


def snapshot(repo: str, what: str, how: str, *, needed: str | None = None) -> Path:
    """The folder of hub id ``repo`` in the offline cache.

    Raises :class:`WeightsNotFoundError` (``what``, ``needed`` or "hub id ... not in the offline cache",
    ``how``) when it is not there.
    """
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo, local_files_only=True))
    except Exception:  # noqa: BLE001 - any miss in the offline cache means "not there"
        raise WeightsNotFoundError(what, needed or f"hub id {repo!r} (not in the offline Hugging Face cache)",
                                   how) from None


def cached_file(repo: str, name: str, revision: str | None = None) -> Path | None:
    """File ``name`` of hub id ``repo`` (at ``revision``) in the offline cache; None when it is not there
    (or huggingface_hub is not installed)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    got = try_to_load_from_cache(repo, name, revision=revision)
    return Path(got) if isinstance(got, str) else None
