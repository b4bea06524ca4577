"""One-off probe: log every vLLM scheduler step (composition, timestamps) as JSON lines.

Loaded via PYTHONPATH in the vLLM processes; patches Scheduler.schedule (composition and
its start time) and EngineCore.step (its end time) when vllm.v1.engine.core is imported.
Writes to $STEPLOG_PATH. Per scheduled request: [tokens scheduled, computed before,
prompt tokens, output tokens before].
"""

import importlib.abc
import importlib.util
import json
import os
import sys
import time

PATH = os.environ.get("STEPLOG_PATH")
_LAST = [None]
_FH = [None]


def _write(rec):
    if _FH[0] is None:
        _FH[0] = open(PATH, "a", buffering=1)  # noqa: SIM115 (held for the process's life)
    _FH[0].write(json.dumps(rec) + "\n")


def _patch(mod):
    from vllm.v1.core.sched import scheduler as smod

    S = smod.Scheduler
    osched = S.schedule

    def schedule(self, *a, **k):
        ts = time.time()
        before = {
            rid: (r.num_computed_tokens, r.num_prompt_tokens, r.num_output_tokens)
            for rid, r in self.requests.items()
        }
        so = osched(self, *a, **k)
        reqs = []
        for rid, n in so.num_scheduled_tokens.items():
            c, p, o = before.get(rid, (0, 0, 0))
            r = self.requests.get(rid)
            reqs.append([n, c, p, o] + ([rid, r.arrival_time] if c == 0 and r is not None else []))
        if _LAST[0] is not None:  # a step without a recorded end
            _write(_LAST[0])
        _LAST[0] = (
            {
                "ts": ts,
                "te": time.time(),
                "r": reqs,
                "new": len(so.scheduled_new_reqs),
                "waiting": len(self.waiting),
                "running": len(self.running),
            }
            if reqs
            else None
        )
        return so

    S.schedule = schedule
    EC = mod.EngineCore
    oadd = EC.add_request

    def add_request(self, request, *a, **k):
        _write(
            {
                "add": time.time(),
                "id": request.request_id,
                "arrival": request.arrival_time,
                "p": request.num_prompt_tokens,
            }
        )
        return oadd(self, request, *a, **k)

    EC.add_request = add_request
    for name in ("step", "step_with_batch_queue"):
        orig = getattr(EC, name)

        def wrapped(self, _orig=orig, _name=name):
            res = _orig(self)
            if _LAST[0] is not None:
                _LAST[0]["t1"] = time.time()
                _LAST[0]["fn"] = _name
                _write(_LAST[0])
                _LAST[0] = None
            return res

        setattr(EC, name, wrapped)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "vllm.v1.engine.core":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None:
            return None
        loader = spec.loader
        orig_exec = loader.exec_module

        def exec_module(module):
            orig_exec(module)
            _patch(module)
            sys.stderr.write(f"steplog: patched in pid {os.getpid()}\n")

        loader.exec_module = exec_module
        return spec


if PATH:
    sys.meta_path.insert(0, _Finder())
