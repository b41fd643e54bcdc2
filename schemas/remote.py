"""Stores read from ``https://``, ``http://`` and ``s3://`` URLs, held to the limits local stores meet.

A URL is a stranger's files behind a connection the stranger controls, so what :func:`budget.inspect_store`
bounds for a folder is bounded here too, plus what only a server can do (docs/explanation/security.md, "Remote stores"):

- time: every request has a deadline on its *whole* answer (``$XBENCH_REMOTE_TIMEOUT``, 60 s, and never past
  the run's ``--timeout``), counted on a monotonic clock from the request's start. A socket read timeout
  restarts at every byte, so a server dripping one byte a second would never trip it; this deadline does;
- bytes: a ``zarr.json`` is read up to ``max_json_bytes`` and refused past it (an endless one costs 4 MiB),
  all of them together up to ``max_metadata_bytes``; a chunk up to the size its listing gave, and never past
  ``max_file_bytes``; a folder page up to 512 bytes per entry still allowed;
- files: the listing stops as soon as it passes ``max_files`` entries (files and folders), page by page, so a
  folder of a million entries is refused after reading a fifth of it and without holding it;
- redirects: none followed; a 3xx answer is a problem line that says where it pointed;
- consistency: the listing and every ``zarr.json`` are read once per run into a :class:`Snapshot`, and Zarr is
  served those bytes, so what was checked is what is parsed. An inspection that reads the store again in the
  same run (``xbench-validate`` reads its kind first) and finds other bytes refuses the store.

The ``remote`` extra is optional: aiohttp (HTTP) and s3fs (S3) are imported only when a URL is read.
"""
from __future__ import annotations

import asyncio
import atexit
import html
import math
import os
import re
import time
from dataclasses import dataclass, field
from urllib.parse import quote, unquote, urljoin

from xbench.schemas import _zarr, budget
from xbench.schemas.budget import Inventory, Limits, MiB
from xbench.schemas.errors import InputError, InvalidStoreError, Problem, StoreNotFoundError

#: Seconds one request may take, from its start to the last byte of its answer; None: ``$XBENCH_REMOTE_TIMEOUT``,
#: else 60.
REMOTE_TIMEOUT: float | None = None
DEFAULT_REMOTE_TIMEOUT = 60.0
SCHEMES = ("https://", "http://", "s3://")
#: Requests in flight at once while listing and sizing a store.
CONCURRENCY = 16
#: Bytes of a folder page per entry it may still list (an HTML line per entry is ~100 bytes).
PAGE_BYTES_PER_ENTRY = 512
MAX_KEY_CHARS = 1024
_PIECE = 1 << 16


class RemoteReadError(InvalidStoreError):
    """A remote store broke a limit or its server failed (one problem line).

    Raised from chunk reads too, where it ends the run: a timeout or a refused answer is the server's doing,
    not a corrupt chunk, and the validators let it through instead of reporting rows as unreadable."""


class _Limit(Exception):
    """A limit passed inside a request, worded by the caller (which knows what was being read)."""


class _TooBig(_Limit):
    """An answer passed the byte cap of its request."""


class _TooMany(_Limit):
    """A listing passed ``max_files`` entries."""


def _problem(where: str, message: str, cls=RemoteReadError) -> InvalidStoreError:
    return cls(Problem(where, message))


def is_supported(url: str) -> bool:
    return str(url).startswith(SCHEMES)


def request_timeout() -> float:
    if REMOTE_TIMEOUT is not None:
        return REMOTE_TIMEOUT
    text = os.environ.get("XBENCH_REMOTE_TIMEOUT", "").strip()
    if not text:
        return DEFAULT_REMOTE_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"$XBENCH_REMOTE_TIMEOUT is {text[:40]!r}; give a positive number of seconds (default 60)")
    return value


# -- one run: its deadline and its snapshots -----------------------------------------------------------------
@dataclass
class _Run:
    """State of the command being run. A command sets the limits once (``apply_budget``); a new limits object is
    a new run: a fresh deadline from ``--timeout`` and no snapshot carried over from the previous one."""

    lim: Limits | None = None
    deadline: float = math.inf
    snapshots: dict = field(default_factory=dict)
    # url -> (when, the error): a store refused is not read again for FAILURE_MEMORY seconds (xbench-validate asks
    # for its kind and then validates it: one wait for a stalled server, not two), then it is tried afresh
    failures: dict = field(default_factory=dict)


_run = _Run()
FAILURE_MEMORY = 60.0
_clients: list = []  # open aiohttp sessions and S3 clients: closed when the run ends or the process exits


def _current() -> _Run:
    """The run's state; called where requests start (never on Zarr's event loop, where closing would block)."""
    global _run
    lim = budget.limits()
    if _run.lim is not lim:
        _close_clients()
        _run = _Run(lim, time.monotonic() + lim.timeout if lim.timeout else math.inf)
    return _run


def _time_left(where: str) -> float:
    run = _run
    left = run.deadline - time.monotonic()
    if left <= 0:
        raise _problem(where, f"the time budget of {run.lim.timeout:g} s ran out while reading the remote store "
                              "(--timeout)")
    return min(request_timeout(), left)


async def _bounded(make, where: str):
    """``await make()`` within the request's deadline; a deadline passed or a connection failure is one line."""
    limit = _time_left(where)
    try:
        return await asyncio.wait_for(make(), limit)
    except asyncio.TimeoutError:
        which = "--timeout" if limit < request_timeout() else "$XBENCH_REMOTE_TIMEOUT"
        raise _problem(where, f"no complete answer within {limit:.3g} s ({which}); the server is too slow or stalled") \
            from None
    except (InputError, _Limit):
        raise
    except Exception as exc:  # noqa: BLE001 - refused connection, TLS, DNS, reset: the server's problem, in a line
        raise _problem(where, f"cannot be read ({type(exc).__name__}: {str(exc) or 'connection failed'})") from None


# -- HTTP ------------------------------------------------------------------------------------------------------
_HREF = re.compile(rb"""href\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>"']+))""", re.IGNORECASE)


_PLAIN = re.compile(r"[A-Za-z0-9._~-][A-Za-z0-9._~%-]*/?\Z")


def _status_line(status: int, reason: str | None, location: str | None) -> str:
    if 300 <= status < 400:
        target = f" to {location[:200]}" if location else ""
        return (f"the server answered HTTP {status} (a redirect{target}); redirects are not followed, "
                "give the store's final URL")
    return f"the server answered HTTP {status}" + (f" ({reason})" if reason else "")


def page_entry(folder_url: str, href: str) -> str | None:
    """The name one link of a folder page lists directly under ``folder_url`` (``name`` or ``name/`` for a
    folder), or None for every other link (parent, sorting, another host, deeper paths)."""
    if _PLAIN.match(href):  # the usual page: a bare relative name; no join needed (a page may list 200,000)
        name = unquote(href)
        return None if name.rstrip("/") in (".", "..") or "/" in name.rstrip("/") else name
    target = unquote(urljoin(folder_url, html.unescape(href)))
    base = unquote(folder_url)
    if not target.startswith(base):
        return None
    rest = target[len(base):]
    if not rest or "?" in rest or "#" in rest:
        return None
    folder = rest.endswith("/")
    name = rest[:-1] if folder else rest
    if not name or "/" in name or name in (".", ".."):
        return None
    return name + "/" if folder else name


class _Http:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.base = self.url + "/"
        self._session = None

    def address(self, key: str) -> str:
        return self.base + quote(key)

    async def session(self):
        if self._session is None or self._session.closed:
            import aiohttp

            # aiohttp's own timeouts only back up the deadline of _bounded (which a drip cannot stretch)
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=request_timeout(), sock_read=request_timeout())
            self._session = aiohttp.ClientSession(timeout=timeout)
            _clients.append(self._session)
        return self._session

    async def get(self, key: str, cap: int, where: str) -> bytes | None:
        """At most ``cap`` bytes of ``key`` (:class:`_TooBig` past them); None when the server has no such key."""
        async def fetch():
            session = await self.session()
            async with session.get(self.address(key), allow_redirects=False) as resp:
                if resp.status == 404:
                    return None
                if resp.status != 200:
                    raise _problem(where, _status_line(resp.status, resp.reason, resp.headers.get("Location")))
                if resp.content_length is not None and resp.content_length > cap:
                    raise _TooBig(resp.content_length)
                data = bytearray()
                async for piece in resp.content.iter_chunked(_PIECE):
                    data += piece
                    if len(data) > cap:
                        raise _TooBig(len(data))
                return bytes(data)

        return await _bounded(fetch, where)

    async def size(self, key: str, where: str) -> int | None:
        """The ``Content-Length`` a HEAD request gives (None when the server does not say)."""
        async def head():
            session = await self.session()
            async with session.head(self.address(key), allow_redirects=False) as resp:
                if resp.status == 404:
                    raise _problem(where, "is listed, but the server answers HTTP 404 for it; the store changed "
                                          "while it was read")
                if resp.status in (405, 501):  # HEAD not offered: the read itself stays capped
                    return None
                if resp.status != 200:
                    raise _problem(where, _status_line(resp.status, resp.reason, resp.headers.get("Location")))
                return resp.content_length

        return await _bounded(head, where)

    async def folder(self, rel: str, room: int, where: str) -> list[str] | None:
        """The entries of the folder page of ``rel`` (``''`` or ``'a/b/'``), read as it arrives and stopped as
        soon as it lists more than ``room`` entries; None when the server gives no page (404)."""
        url = self.base + quote(rel)
        cap = max(MiB, (room + 64) * PAGE_BYTES_PER_ENTRY)

        async def fetch():
            session = await self.session()
            async with session.get(url, allow_redirects=False) as resp:
                if resp.status in (403, 404):
                    return None
                if resp.status != 200:
                    raise _problem(where, _status_line(resp.status, resp.reason, resp.headers.get("Location")))
                names: set[str] = set()
                tail, read = b"", 0
                async for piece in resp.content.iter_chunked(_PIECE):
                    read += len(piece)
                    if read > cap:
                        raise _problem(where, f"its folder page is larger than {cap // MiB} MiB")
                    text = tail + piece
                    end = text.rfind(b">") + 1  # a link ends before its tag's '>': parse up to the last one
                    for m in _HREF.finditer(text, 0, end):
                        href = (m.group(1) or m.group(2) or m.group(3)).decode("utf-8", "replace")
                        name = page_entry(url, href)
                        if name is not None:
                            names.add(name)
                    if len(names) > room:
                        raise _TooMany()
                    tail = text[end:]
                    if len(tail) > _PIECE * 4:  # no tag end in sight: not a folder page a link could hide in
                        tail = tail[-_PIECE:]
                return sorted(names)

        return await _bounded(fetch, where)

    async def walk(self, lim: Limits, where: str) -> dict[str, int | None] | None:
        """Every file key under the store, folder page by folder page (``CONCURRENCY`` at a time); None when
        the server gives no folder pages."""
        sizes: dict[str, int | None] = {}
        todo, entries = [""], 0
        while todo:
            batch, todo = todo[:CONCURRENCY], todo[CONCURRENCY:]
            room = lim.max_files - entries
            pages = await asyncio.gather(*(self.folder(rel, room, f"{self.url}/{rel}") for rel in batch))
            for rel, names in zip(batch, pages):
                if names is None:
                    if not rel:
                        return None
                    raise _problem(f"{self.url}/{rel}", "is listed, but the server gives no page for it; the store "
                                                        "changed while it was read")
                for name in names:
                    entries += 1
                    (todo.append(rel + name) if name.endswith("/") else sizes.__setitem__(rel + name, None))
                if entries > lim.max_files:
                    raise _TooMany()
        return sizes

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


# -- S3 --------------------------------------------------------------------------------------------------------
def s3_options() -> dict:
    """s3fs options: the endpoint from ``$AWS_ENDPOINT_URL`` (an S3-compatible server) and anonymous access when
    no credentials are set; botocore's own timeouts back up the deadline of :func:`_bounded`."""
    opts: dict = {"anon": not (os.environ.get("AWS_ACCESS_KEY_ID") or os.environ.get("AWS_PROFILE")),
                  "config_kwargs": {"connect_timeout": request_timeout(), "read_timeout": request_timeout(),
                                    "retries": {"max_attempts": 2}}}
    if os.environ.get("AWS_ENDPOINT_URL"):
        opts["endpoint_url"] = os.environ["AWS_ENDPOINT_URL"]
    return opts


class _S3:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        bucket, _, path = self.url[len("s3://"):].partition("/")
        self.bucket, self.prefix = bucket, (path + "/" if path else "")
        self._client = None

    async def client(self):
        if self._client is None or self._client not in _clients:  # closed when the previous run ended
            import s3fs

            fs = s3fs.S3FileSystem(asynchronous=True, skip_instance_cache=True, **s3_options())
            self._client = await fs.set_session()
            _clients.append(self._client)
        return self._client

    @staticmethod
    def _error(exc, where: str) -> InvalidStoreError:
        code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", "")) or type(exc).__name__
        return _problem(where, f"the server answered {code}")

    async def get(self, key: str, cap: int, where: str) -> bytes | None:
        from botocore.exceptions import ClientError

        async def fetch():
            client = await self.client()
            try:
                resp = await client.get_object(Bucket=self.bucket, Key=self.prefix + key)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                    return None
                raise self._error(exc, where) from None
            body = resp["Body"]
            try:
                if (resp.get("ContentLength") or 0) > cap:
                    raise _TooBig(resp["ContentLength"])
                data = bytearray()
                while piece := await body.read(_PIECE):
                    data += piece
                    if len(data) > cap:
                        raise _TooBig(len(data))
                return bytes(data)
            finally:
                body.close()

        return await _bounded(fetch, where)

    async def size(self, key: str, where: str) -> int | None:  # the listing gave every size
        return None

    async def walk(self, lim: Limits, where: str) -> dict[str, int | None] | None:
        """Every key under the prefix with its size, a page of at most 1000 at a time."""
        from botocore.exceptions import ClientError

        sizes: dict[str, int | None] = {}
        token = None
        while True:
            args = {"Bucket": self.bucket, "Prefix": self.prefix, "MaxKeys": 1000}
            if token:
                args["ContinuationToken"] = token

            async def page(args=args):
                try:
                    return await (await self.client()).list_objects_v2(**args)
                except ClientError as exc:
                    code = exc.response.get("Error", {}).get("Code")
                    if code in ("NoSuchBucket", "404"):
                        raise _problem(self.url, f"not found ({code})", StoreNotFoundError) from None
                    raise self._error(exc, where) from None

            listed = await _bounded(page, where)
            for obj in listed.get("Contents", []) or []:
                key = str(obj.get("Key", ""))[len(self.prefix):]
                if key and not key.endswith("/"):
                    sizes[key] = int(obj.get("Size") or 0)
            if len(sizes) > lim.max_files:
                raise _TooMany()
            token = listed.get("NextContinuationToken")
            if not listed.get("IsTruncated") or not token:
                return sizes

    async def close(self) -> None:
        pass


def _transport(url: str):
    return _S3(url) if url.startswith("s3://") else _Http(url)


# -- a snapshot: listing and metadata read once ----------------------------------------------------------------
@dataclass
class Snapshot:
    """A remote store as inspected: every key with its size (the listed size, the server's ``Content-Length``,
    or ``max_file_bytes`` when neither is known) and every ``zarr.json``'s bytes."""

    url: str
    transport: object
    sizes: dict[str, int]
    metadata: dict[str, bytes]

    @property
    def inventory(self) -> Inventory:
        return Inventory(self.sizes, self.sizes)

    def where(self, key: str) -> str:
        return f"{self.url}/{key}"

    async def read(self, key: str) -> bytes | None:
        """A chunk's bytes, at most the size the store was inspected with."""
        if key in self.metadata:
            return self.metadata[key]
        if key not in self.sizes:
            return None
        cap = self.sizes[key]
        try:
            data = await self.transport.get(key, cap, self.where(key))
        except _TooBig:
            raise _problem(self.where(key), f"the server sends more than the {cap} bytes it listed; the store "
                                            "changed while it was read") from None
        if data is None:
            raise _problem(self.where(key), "is listed, but the server answers that it does not exist; the store "
                                            "changed while it was read")
        return data


async def _root_document(transport, url: str, lim: Limits) -> bytes:
    """The root ``zarr.json``; a store that is not there is named as missing, in the server's own terms."""
    try:
        raw = await transport.get("zarr.json", lim.max_json_bytes, f"{url}/zarr.json")
    except _TooBig:
        raise _problem(f"{url}/zarr.json", f"metadata document is larger than {lim.max_json_bytes // MiB} MiB") \
            from None
    if raw is not None:
        return raw
    if isinstance(transport, _Http):
        try:
            page = await transport.folder("", 0, url)
        except (_TooMany, InvalidStoreError):
            page = ["?"]  # a page came back: the folder exists
        if page is None:
            raise _problem(url, "not found (HTTP 404)", StoreNotFoundError)
    else:
        try:
            found = await transport.walk(Limits(max_files=1), url)
        except _TooMany:
            found = True
        if not found:
            raise _problem(url, "not found (no object under this prefix)", StoreNotFoundError)
    raise _problem(url, "holds no zarr.json at its top, so it is not a Zarr v3 store (give the store's own "
                        "folder, the one that holds zarr.json)", StoreNotFoundError)


async def _inspect(url: str, lim: Limits, *, sized: dict[str, int] | None = None) -> tuple[Snapshot, list[Problem]]:
    """List ``url`` and read every ``zarr.json`` within the limits; ``sized``: sizes already known (a second
    inspection does not ask for every chunk's size again)."""
    transport = _transport(url)
    root = await _root_document(transport, url, lim)
    try:
        listed = await transport.walk(lim, url)
    except _TooMany:
        return Snapshot(url, transport, {}, {}), [Problem(url, f"holds more than {lim.max_files} files and folders; "
                                                              f"the limit is {lim.max_files}")]
    if listed is None:
        return Snapshot(url, transport, {}, {}), [Problem(
            url + "/", "the server gives no folder listing; XBench lists a store to find every chunk, so serve the "
                       "folder with folder pages (e.g. python -m http.server) or from S3")]
    listed.setdefault("zarr.json", len(root))
    problems = [Problem(f"{url}/{k[:80]}…", f"key is longer than {MAX_KEY_CHARS} characters")
                for k in listed if len(k) > MAX_KEY_CHARS][:1]
    if problems:
        return Snapshot(url, transport, {}, {}), problems
    metadata, problems = await _read_metadata(transport, url, listed, root, lim)
    if problems:
        return Snapshot(url, transport, {}, {}), problems
    # The root read again once everything else was: a store being uploaded or rewritten while it is read (or a
    # server that answers each request differently) is refused here, before Zarr parses any of it.
    if await _root_document(transport, url, lim) != root:
        return Snapshot(url, transport, {}, {}), [Problem(f"{url}/zarr.json", "changed between two reads; a store "
                                                                              "must not change while it is read")]
    sizes = await _sizes(transport, url, listed, metadata, lim, sized or {})
    return Snapshot(url, transport, sizes, metadata), []


async def _read_metadata(transport, url: str, listed: dict, root: bytes, lim: Limits):
    keys = sorted(k for k in listed if k == "zarr.json" or k.endswith("/zarr.json"))
    known = sum(listed[k] or 0 for k in keys)
    if known > lim.max_metadata_bytes:
        return {}, [Problem(url, f"its zarr.json documents hold {known / MiB:.0f} MiB; the limit is "
                                 f"{lim.max_metadata_bytes // MiB} MiB")]
    metadata = {"zarr.json": root}
    problems: list[Problem] = []
    sem = asyncio.Semaphore(CONCURRENCY)

    async def one(key: str) -> None:
        async with sem:
            try:
                raw = await transport.get(key, lim.max_json_bytes, f"{url}/{key}")
            except _TooBig:
                problems.append(Problem(f"{url}/{key}", f"metadata document is larger than "
                                                        f"{lim.max_json_bytes // MiB} MiB"))
                return
        if raw is None:
            problems.append(Problem(f"{url}/{key}", "is listed, but the server answers that it does not exist; the "
                                                    "store changed while it was read"))
            return
        metadata[key] = raw

    await asyncio.gather(*(one(k) for k in keys if k != "zarr.json"))
    total = sum(len(v) for v in metadata.values())
    if not problems and total > lim.max_metadata_bytes:
        problems.append(Problem(url, f"its zarr.json documents hold {total / MiB:.0f} MiB; the limit is "
                                     f"{lim.max_metadata_bytes // MiB} MiB"))
    for key in keys:
        if key in metadata and not problems:
            problems += budget.json_document_problems(metadata[key], f"{url}/{key}", lim)
    return metadata, problems


async def _sizes(transport, url: str, listed: dict, metadata: dict, lim: Limits, known: dict) -> dict[str, int]:
    """Every key's size: the listing's, then a HEAD request's (HTTP pages list names only); a size the server
    will not say counts as the largest a file may have (the read stays capped there)."""
    sizes = {k: len(v) for k, v in metadata.items()}
    ask = [k for k, v in listed.items() if k not in sizes and v is None and k not in known]
    sizes.update({k: v for k, v in listed.items() if k not in sizes and v is not None})
    sizes.update({k: known[k] for k in listed if k not in sizes and k in known})
    sem = asyncio.Semaphore(CONCURRENCY)

    async def one(key: str) -> None:
        async with sem:
            size = await transport.size(key, f"{url}/{key}")
        sizes[key] = lim.max_file_bytes if size is None else size

    await asyncio.gather(*(one(k) for k in ask))
    return sizes


def _file_problems(snap: Snapshot, lim: Limits) -> list[Problem]:
    return [Problem(snap.where(k), f"is {n / MiB:.0f} MiB; no chunk may be larger than {lim.max_file_bytes // MiB} MiB")
            for k, n in sorted(snap.sizes.items()) if n > lim.max_file_bytes]


def _changes(first: Snapshot, again: Snapshot) -> list[Problem]:
    """What a second inspection found different from the first: the store changed while it was read."""
    for key in sorted(set(first.metadata) | set(again.metadata)):
        if first.metadata.get(key) != again.metadata.get(key):
            return [Problem(first.where(key), "changed between two reads; a store must not change while it is read")]
    if set(first.sizes) != set(again.sizes):
        return [Problem(first.url, "its listing changed between two reads; a store must not change while it is read")]
    return []


def _check_scheme(url: str) -> None:
    if not is_supported(url):
        scheme = url.split("://", 1)[0]
        raise _problem(url, f"{scheme}:// URLs are not read; give a local path or an https://, http:// or s3:// URL")


def _extra_missing(url: str, exc: ImportError) -> InvalidStoreError:
    return _problem(url, f"reading remote stores needs the 'remote' extra: pip install '.[remote]' in a checkout "
                         f"of XBench (pip install 'xbench-cxr[remote]' once it is released on PyPI; "
                         f"missing: {exc.name})")


def snapshot(url: str) -> Snapshot:
    """The store at ``url`` as first inspected in this run (inspected now if it was not); raises
    :class:`~xbench.schemas.errors.InvalidStoreError` (or ``StoreNotFoundError``) with every problem found."""
    url = str(url).rstrip("/")
    _check_scheme(url)
    run = _current()
    if url in run.snapshots:
        return run.snapshots[url]
    _raise_recent_failure(run, url)
    try:
        snap, problems = _run_inspection(url, run.lim)
        if problems:
            raise InvalidStoreError(problems)
    except InputError as exc:
        run.failures[url] = (time.monotonic(), exc)
        raise
    run.snapshots[url] = snap
    return snap


def _raise_recent_failure(run: _Run, url: str) -> None:
    when, error = run.failures.get(url, (-math.inf, None))
    if time.monotonic() - when < FAILURE_MEMORY:
        raise error


def forget(url: str | None = None) -> None:
    """Drop what this run remembers of ``url`` (every URL when None): the next read inspects it afresh. The
    command-line tools never need this (each command is a run); a long-lived process that reads a store again
    after it was replaced does."""
    run = _current()
    for table in (run.snapshots, run.failures):
        if url is None:
            table.clear()
        else:
            table.pop(str(url).rstrip("/"), None)


def _run_inspection(url: str, lim: Limits, sized: dict | None = None) -> tuple[Snapshot, list[Problem]]:
    try:  # before any request: a missing extra is named as such, not as a server that cannot be read
        __import__("s3fs" if url.startswith("s3://") else "aiohttp")
    except ImportError as exc:
        raise _extra_missing(url, exc) from None
    snap, problems = _zarr.run_sync(_inspect(url, lim, sized=sized))
    return snap, problems or _file_problems(snap, lim)


def inspect_remote(url: str, lim: Limits | None = None) -> tuple[Inventory | None, list[Problem]]:
    """:func:`budget.inspect_store` for a URL: the inventory, or None and the problems (never raises for a bad
    store). Reads the store afresh; when this run read it before, any difference is a problem."""
    url = str(url).rstrip("/")
    try:
        _check_scheme(url)
        run = _current()
        _raise_recent_failure(run, url)
        first = run.snapshots.get(url)
        snap, problems = _run_inspection(url, lim or run.lim, first.sizes if first else None)
    except InputError as exc:
        return None, exc.problems
    if not problems and first is not None:
        problems = _changes(first, snap)
    if problems:
        return None, problems
    run.snapshots.setdefault(url, snap)
    return run.snapshots[url].inventory, []


# -- the store Zarr reads through ----------------------------------------------------------------------------
class SnapshotStore(_zarr.StoreBase):
    """A read-only Zarr store over a :class:`Snapshot`: metadata and listings from the snapshot (no request),
    chunks from the server, each capped at its inspected size and bounded by the request deadline."""

    supports_writes = False
    supports_deletes = False
    supports_listing = True

    def __init__(self, snap: Snapshot) -> None:
        super().__init__(read_only=True)
        self.snap = snap

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SnapshotStore) and other.snap is self.snap

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"SnapshotStore({self.snap.url!r})"

    async def get(self, key, prototype=None, byte_range=None):
        data = await self.snap.read(key)
        if data is None:
            return None
        data = _slice(data, byte_range)
        if prototype is None:
            return _zarr.buffer_prototype().buffer.from_bytes(data)
        return prototype.buffer.from_bytes(data)

    async def get_partial_values(self, prototype, key_ranges):
        return [await self.get(k, prototype, r) for k, r in key_ranges]

    async def exists(self, key: str) -> bool:
        return key in self.snap.sizes

    async def set(self, key, value, byte_range=None) -> None:
        raise _problem(self.snap.url, "remote stores are read-only; write to a local .zarr folder")

    async def delete(self, key) -> None:
        raise _problem(self.snap.url, "remote stores are read-only; write to a local .zarr folder")

    async def list(self):
        for key in sorted(self.snap.sizes):
            yield key

    async def list_prefix(self, prefix: str):
        for key in sorted(self.snap.sizes):
            if key.startswith(prefix):
                yield key

    async def list_dir(self, prefix: str):
        prefix = prefix.rstrip("/")
        lead = prefix + "/" if prefix else ""
        seen = set()
        for key in sorted(self.snap.sizes):
            if key.startswith(lead):
                child = key[len(lead):].split("/", 1)[0]
                if child and child not in seen:
                    seen.add(child)
                    yield child


def _slice(data: bytes, byte_range) -> bytes:
    """``data`` cut to a Zarr byte request (a range, an offset or a suffix), recognised by its fields."""
    if byte_range is None:
        return data
    if hasattr(byte_range, "suffix"):
        return data[-byte_range.suffix:] if byte_range.suffix else b""
    if hasattr(byte_range, "offset"):
        return data[byte_range.offset:]
    return data[byte_range.start:byte_range.end]


def open_store(url: str) -> SnapshotStore:
    return SnapshotStore(snapshot(url))


@atexit.register
def _close_clients() -> None:
    while _clients:
        client = _clients.pop()
        try:
            _zarr.run_sync(client.close())
        except Exception:  # noqa: BLE001 - a connection that will not close cleanly is dropped all the same
            pass
