"""Trace readers and the burstguard JSONL writer.

Supported formats (detected from the content; `fmt` overrides):

- ``azure``: Azure LLM inference CSV (TIMESTAMP, ContextTokens, GeneratedTokens);
  TIMESTAMP is a datetime (2023/2024 traces) or a number of seconds.
- ``mooncake``: Mooncake JSONL (timestamp in ms, input_length, output_length, hash_ids).
- ``burstgpt``: BurstGPT CSV (Timestamp, Model, Request tokens, Response tokens,
  Total tokens, Log Type); failed rows (zero response tokens, or a Log Type naming a
  failure) are kept and marked ``failed``.
- ``burstguard``: burstguard's own JSONL (see docs/formats.md); `write_workload` writes
  it and `load_workload` reads it back without loss.

Arrival times of external traces are rebased so that the first request arrives at 0 s.
Readers are column-oriented: rows are split by the C csv/json parsers, columns are
converted by numpy, and only when a conversion fails is the offending line searched for,
so a million-line trace loads in about a second and errors still name file and line.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from burstguard.errors import FileError, read_user_text
from burstguard.workload.spec import Workload

WORKLOAD_FORMAT = "burstguard.workload/1"
FORMATS = ("burstguard", "azure", "mooncake", "burstgpt")
_OPTIONAL_COLUMNS = (
    "ids", "priority_class", "tenant", "prefix_hashes", "failed",
    "session", "turn", "after", "think_s",
)  # fmt: skip
_JSON_KEY = {"ids": "id"}  # Workload column -> JSONL key, where they differ
_TZ_SUFFIX = re.compile(r"(Z|[+-]\d\d:?\d\d)$")


def load_workload(path: Path | str, fmt: str | None = None) -> Workload:
    """Reads a trace in any supported format (detected from content unless `fmt` is given)."""
    path = Path(path)
    if fmt is not None and fmt not in FORMATS:
        raise FileError(f"unknown trace format {fmt!r}; choose one of {', '.join(FORMATS)}")
    text = _read_text(path)
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise FileError(f"{path}: the file is empty (no requests)")
    fmt = fmt or detect_format(path, lines[first])
    reader = {
        "burstguard": _read_burstguard,
        "azure": _read_azure,
        "mooncake": _read_mooncake,
        "burstgpt": _read_burstgpt,
    }[fmt]
    workload = reader(path, lines)
    if len(workload) == 0:
        raise FileError(f"{path}: no requests in the file (format {fmt})")
    workload.meta.setdefault("format", fmt)
    return workload


def detect_format(path: Path, first_line: str) -> str:
    """Names the format of a trace from its first non-blank line."""
    line = first_line.strip().lstrip("\ufeff")
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict):
            if obj.get("format") == WORKLOAD_FORMAT or "arrival_s" in obj:
                return "burstguard"
            if "timestamp" in obj and "input_length" in obj:
                return "mooncake"
    else:
        header = {c.strip().lower() for c in next(csv.reader([line]))}
        if {"timestamp", "contexttokens", "generatedtokens"} <= header:
            return "azure"
        if {"timestamp", "request tokens", "response tokens"} <= header:
            return "burstgpt"
    shown = line if len(line) <= 80 else line[:77] + "..."
    raise FileError(
        f"{path}: unrecognised trace format (line 1: {shown!r}); "
        f"give --format, one of {', '.join(FORMATS)}"
    )


def write_workload(path: Path | str, workload: Workload) -> None:
    """Writes `workload` as burstguard JSONL: one header line, then one request per line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = [c for c in _OPTIONAL_COLUMNS if getattr(workload, c) is not None]
    header = {
        "format": WORKLOAD_FORMAT,
        "source": workload.source,
        "columns": columns,
        "meta": workload.meta,
    }
    arrivals = workload.arrival_s.tolist()
    if not all(map(math.isfinite, arrivals)):
        raise FileError(f"{path}: cannot write non-finite arrival times")
    prompts = workload.prompt_tokens.tolist()
    outputs = workload.output_tokens.tolist()
    extra: list[tuple[str, Sequence[Any]]] = [
        (_JSON_KEY.get(c, c), _column_values(workload, c)) for c in columns
    ]
    with path.open("w", encoding="utf-8") as f:
        f.write(json.dumps(header, default=_json_default) + "\n")
        for i, (a, p, o) in enumerate(zip(arrivals, prompts, outputs, strict=True)):
            row = f'{{"arrival_s": {a!r}, "prompt_tokens": {p}, "output_tokens": {o}'
            for key, values in extra:
                value = values[i]
                if value is not None:
                    row += f", {json.dumps(key)}: {json.dumps(value)}"
            f.write(row + "}\n")


def _column_values(workload: Workload, column: str) -> Sequence[Any]:
    values = getattr(workload, column)
    if column == "prefix_hashes":
        return [[int(h) for h in hashes] for hashes in values]
    if column == "failed":
        return [True if v else None for v in values.tolist()]
    if column == "after":
        return [list(a) if a else None for a in values]
    if column == "think_s":
        return [v or None for v in values.tolist()]
    if column == "turn":
        return values.tolist()
    return [None if v is None else str(v) for v in values.tolist()]


def _json_default(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple | set):
        return list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


# --- shared helpers ------------------------------------------------------------------


def _read_text(path: Path) -> str:
    if not path.exists():
        raise FileError(f"{path}: no such file")
    if path.is_dir():
        raise FileError(f"{path}: is a directory, not a trace file")
    return read_user_text(path)


def _fail(path: Path, line: int, message: str) -> FileError:
    return FileError(f"{path}:{line}: {message}")


def _convert(
    path: Path,
    values: Sequence[Any],
    line_of: Callable[[int], int],
    name: str,
    convert: Callable[[Sequence[Any]], np.ndarray],
    check: Callable[[Any], object],
) -> np.ndarray:
    """Converts a whole column at once; on failure finds and names the first bad line."""
    try:
        return convert(values)
    except (ValueError, TypeError, OverflowError):
        for i, value in enumerate(values):
            try:
                check(value)
            except (ValueError, TypeError, OverflowError):
                raise _fail(path, line_of(i), f"bad {name} {value!r}") from None
        raise FileError(f"{path}: cannot read column {name}") from None


def _finite_float(value: Any) -> float:
    if isinstance(value, bool) or value is None:
        raise TypeError("not a number")
    out = float(value)
    if not math.isfinite(out):
        raise ValueError("not finite")
    return out


def _token_count(value: Any) -> int:
    out = _finite_float(value)
    if out < 0 or out != int(out):
        raise ValueError("not a non-negative integer")
    return int(out)


def _floats(values: Sequence[Any]) -> np.ndarray:
    if any(v is None or isinstance(v, bool) for v in values):
        raise TypeError("null or boolean")
    out = np.asarray(values, dtype=np.float64)
    if out.ndim != 1 or not np.isfinite(out).all():
        raise ValueError("not finite")
    return out


def _tokens(values: Sequence[Any]) -> np.ndarray:
    out = _floats(values)
    if (out < 0).any() or (out != np.floor(out)).any():
        raise ValueError("not a non-negative integer")
    return out.astype(np.int64)


def _sorted(workload: Workload) -> Workload:
    """Returns `workload` ordered by arrival time (stable), as the Workload contract requires."""
    order = np.argsort(workload.arrival_s, kind="stable")
    if (order == np.arange(order.size)).all():
        return workload
    from burstguard.workload.transform import take

    return take(workload, order)


def _rebase(arrival_s: np.ndarray) -> np.ndarray:
    return arrival_s - arrival_s.min() if arrival_s.size else arrival_s


# --- CSV formats ---------------------------------------------------------------------


def _csv_columns(
    path: Path, lines: list[str], wanted: dict[str, str]
) -> tuple[dict[str, list[str]], Callable[[int], int]]:
    """Splits a CSV with a header; returns the `wanted` columns (key -> header name)."""
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header_index = next(i for i, row in enumerate(rows) if row)
    header = [c.strip().lower().lstrip("\ufeff") for c in rows[header_index]]
    index: dict[str, int] = {}
    for key, name in wanted.items():
        if name not in header:
            raise _fail(path, header_index + 1, f"missing column {name!r} in the header")
        index[key] = header.index(name)
    body_start = header_index + 1
    data_lines = [i for i in range(body_start, len(rows)) if rows[i]]
    width = len(header)
    for i in data_lines:
        if len(rows[i]) != width:
            raise _fail(path, i + 1, f"expected {width} fields, found {len(rows[i])}")
    data = [rows[i] for i in data_lines]
    columns = {key: [row[j] for row in data] for key, j in index.items()}
    return columns, lambda k: data_lines[k] + 1


def _datetime_seconds(values: Sequence[str]) -> np.ndarray:
    stamps = np.asarray([v.strip() for v in values])
    if stamps.size and _TZ_SUFFIX.search(str(stamps[0])):
        seconds = np.asarray([datetime.fromisoformat(v).timestamp() for v in stamps])
        return seconds - seconds.min()
    parsed = stamps.astype("datetime64[ns]")
    if np.isnat(parsed).any():
        raise ValueError("empty timestamp")
    return (parsed - parsed.min()).astype(np.int64) / 1e9


def _timestamps(path: Path, values: list[str], line_of: Callable[[int], int]) -> np.ndarray:
    """Seconds from a column of numbers or datetimes (Azure uses datetimes)."""
    first = values[0].strip() if values else ""
    try:
        float(first)
        numeric = True
    except ValueError:
        numeric = False
    if numeric:
        return _convert(path, values, line_of, "timestamp", _floats, _finite_float)

    def check(value: str) -> object:
        return _datetime_seconds([value])

    return _convert(path, values, line_of, "timestamp", _datetime_seconds, check)


def _read_azure(path: Path, lines: list[str]) -> Workload:
    wanted = {"t": "timestamp", "p": "contexttokens", "o": "generatedtokens"}
    cols, line_of = _csv_columns(path, lines, wanted)
    arrival = _timestamps(path, cols["t"], line_of)
    workload = Workload(
        arrival_s=_rebase(arrival),
        prompt_tokens=_convert(path, cols["p"], line_of, "ContextTokens", _tokens, _token_count),
        output_tokens=_convert(path, cols["o"], line_of, "GeneratedTokens", _tokens, _token_count),
        source=str(path),
        meta={"format": "azure", "start": cols["t"][0].strip() if cols["t"] else None},
    )
    return _sorted(workload)


def _read_burstgpt(path: Path, lines: list[str]) -> Workload:
    wanted = {
        "t": "timestamp",
        "model": "model",
        "p": "request tokens",
        "o": "response tokens",
        "log": "log type",
    }
    cols, line_of = _csv_columns(path, lines, wanted)
    arrival = _convert(path, cols["t"], line_of, "Timestamp", _floats, _finite_float)
    prompt = _convert(path, cols["p"], line_of, "Request tokens", _tokens, _token_count)
    output = _convert(path, cols["o"], line_of, "Response tokens", _tokens, _token_count)
    log_type = np.asarray([v.strip().lower() for v in cols["log"]], dtype=object)
    failed = (output == 0) | np.asarray(["fail" in v for v in log_type], dtype=bool)
    workload = Workload(
        arrival_s=_rebase(arrival),
        prompt_tokens=prompt,
        output_tokens=output,
        failed=failed,
        source=str(path),
        meta={
            "format": "burstgpt",
            "models": dict(Counter(v.strip() for v in cols["model"])),
            "log_types": dict(Counter(v.strip() for v in cols["log"])),
            "failed": int(failed.sum()),
        },
    )
    return _sorted(workload)


# --- JSONL formats -------------------------------------------------------------------


def _json_lines(path: Path, lines: list[str]) -> tuple[list[Any], list[int]]:
    """Parses every non-blank line; returns the objects and their 1-based line numbers."""
    numbers = [i + 1 for i, line in enumerate(lines) if line.strip()]
    try:
        objs = json.loads("[" + ",".join(lines[n - 1] for n in numbers) + "]")
        if len(objs) != len(numbers):  # a line held two values, e.g. "1, 2"
            raise ValueError("line count mismatch")
    except ValueError:
        objs = []
        for n in numbers:
            try:
                objs.append(json.loads(lines[n - 1]))
            except json.JSONDecodeError as exc:
                raise _fail(path, n, f"invalid JSON ({exc.msg} at column {exc.colno})") from None
    for obj, n in zip(objs, numbers, strict=True):
        if not isinstance(obj, dict):
            raise _fail(path, n, f"expected a JSON object, found {type(obj).__name__}")
    return objs, numbers


def _field(path: Path, objs: list[dict[str, Any]], numbers: list[int], key: str) -> list[Any]:
    try:
        return [o[key] for o in objs]
    except KeyError:
        k = next(i for i, o in enumerate(objs) if key not in o)
        raise _fail(path, numbers[k], f"missing field {key!r}") from None


def _read_mooncake(path: Path, lines: list[str]) -> Workload:
    objs, numbers = _json_lines(path, lines)

    def line_of(k: int) -> int:
        return numbers[k]

    ts = _field(path, objs, numbers, "timestamp")
    arrival = _convert(path, ts, line_of, "timestamp", _floats, _finite_float) / 1000.0
    prompt = _convert(
        path,
        _field(path, objs, numbers, "input_length"),
        line_of,
        "input_length",
        _tokens,
        _token_count,
    )
    output = _convert(
        path,
        _field(path, objs, numbers, "output_length"),
        line_of,
        "output_length",
        _tokens,
        _token_count,
    )
    hashes = _hash_lists(path, [o.get("hash_ids", []) for o in objs], line_of, "hash_ids")
    workload = Workload(
        arrival_s=_rebase(arrival),
        prompt_tokens=prompt,
        output_tokens=output,
        prefix_hashes=hashes,
        source=str(path),
        meta={"format": "mooncake", "block_tokens": 512},
    )
    return _sorted(workload)


def _hash_lists(
    path: Path, values: list[Any], line_of: Callable[[int], int], name: str
) -> list[tuple[int, ...]]:
    try:
        out = [tuple(v) for v in values]
        if all(type(h) is int for hashes in out for h in hashes):
            return out
    except TypeError:
        pass
    for i, v in enumerate(values):
        if not isinstance(v, list) or not all(type(h) is int for h in v):
            raise _fail(path, line_of(i), f"{name} must be a list of integers, found {v!r}")
    raise FileError(f"{path}: cannot read {name}")  # pragma: no cover - unreachable


def _read_burstguard(path: Path, lines: list[str]) -> Workload:
    objs, numbers = _json_lines(path, lines)
    header: dict[str, Any] = {}
    if objs and "format" in objs[0]:
        header = objs[0]
        if header["format"] != WORKLOAD_FORMAT:
            raise _fail(
                path,
                numbers[0],
                f"unsupported format {header['format']!r} (this burstguard reads "
                f"{WORKLOAD_FORMAT})",
            )
        objs, numbers = objs[1:], numbers[1:]

    def line_of(k: int) -> int:
        return numbers[k]

    arrival = _convert(
        path,
        _field(path, objs, numbers, "arrival_s"),
        line_of,
        "arrival_s",
        _floats,
        _finite_float,
    )
    prompt = _convert(
        path,
        _field(path, objs, numbers, "prompt_tokens"),
        line_of,
        "prompt_tokens",
        _tokens,
        _token_count,
    )
    output = _convert(
        path,
        _field(path, objs, numbers, "output_tokens"),
        line_of,
        "output_tokens",
        _tokens,
        _token_count,
    )
    if "columns" in header:
        present = set(header["columns"])
    else:
        keys = set().union(*(o.keys() for o in objs)) if objs else set()
        present = {c for c in _OPTIONAL_COLUMNS if _JSON_KEY.get(c, c) in keys}
    columns: dict[str, Any] = {}
    for column in ("ids", "priority_class", "tenant"):
        if column in present:
            key = _JSON_KEY.get(column, column)
            values = [o.get(key) for o in objs]
            for k, v in enumerate(values):
                if v is not None and not isinstance(v, str):
                    raise _fail(path, numbers[k], f"{key} must be a string, found {v!r}")
            columns[column] = np.asarray(values, dtype=object)
    if "prefix_hashes" in present:
        raw = [o.get("prefix_hashes", []) for o in objs]
        columns["prefix_hashes"] = _hash_lists(path, raw, line_of, "prefix_hashes")
    if present & {"session", "turn", "after", "think_s"}:
        columns.update(_session_columns(path, objs, numbers, columns.get("ids")))
    if "failed" in present:
        flags = [o.get("failed", False) for o in objs]
        for k, v in enumerate(flags):
            if not isinstance(v, bool):
                raise _fail(path, numbers[k], f"failed must be true or false, found {v!r}")
        columns["failed"] = np.asarray(flags, dtype=bool)
    workload = Workload(
        arrival_s=arrival,
        prompt_tokens=prompt,
        output_tokens=output,
        source=header.get("source", str(path)),
        meta=dict(header.get("meta", {})),
        **columns,
    )
    return _sorted(workload)


def _session_columns(
    path: Path,
    objs: list[dict[str, Any]],
    numbers: list[int],
    ids: np.ndarray | None,
) -> dict[str, Any]:
    """`session`, `turn`, `after`, `think_s` (all four: a file may hold some); every id
    in an `after` names a request of the file (cycles: `workload.sessions.Dependencies`)."""
    session: list[str | None] = []
    turn: list[int] = []
    after: list[tuple[str, ...]] = []
    think: list[float] = []
    known = set(ids.tolist()) if ids is not None else {f"r{i}" for i in range(len(objs))}
    for k, o in enumerate(objs):
        s, t, a, w = o.get("session"), o.get("turn", 0), o.get("after") or [], o.get("think_s", 0)
        if s is not None and not isinstance(s, str):
            raise _fail(path, numbers[k], f"session must be a string, found {s!r}")
        if type(t) is not int or t < 0:
            raise _fail(path, numbers[k], f"turn must be an integer >= 0, found {t!r}")
        if not isinstance(a, list) or not all(isinstance(x, str) for x in a):
            raise _fail(path, numbers[k], f"after must be a list of request ids, found {a!r}")
        missing = [x for x in a if x not in known]
        if missing:
            raise _fail(path, numbers[k], f"after: no request {missing[0]!r} in the file")
        try:
            w = _finite_float(w)
        except (TypeError, ValueError):
            w = -1.0
        if w < 0:
            raise _fail(path, numbers[k], f"think_s must be a number >= 0, found {o['think_s']!r}")
        session.append(s)
        turn.append(t)
        after.append(tuple(a))
        think.append(w)
    return {
        "session": np.asarray(session, dtype=object),
        "turn": np.asarray(turn, dtype=np.int64),
        "after": after,
        "think_s": np.asarray(think, dtype=np.float64),
    }
