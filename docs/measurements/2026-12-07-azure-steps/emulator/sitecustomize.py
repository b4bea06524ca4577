"""One-off probe: log every emulator EngineCore step (same JSON-lines layout as steplog)."""

import json
import os
import time

PATH = os.environ.get("STEPLOG_PATH")
if PATH:
    from burstguard.core.engine import core as _core

    _fh = open(PATH, "a", buffering=1)  # noqa: SIM115 (held for the process's life)
    _orig = _core.EngineCore.begin_step

    def begin_step(self, now):
        before = {
            id(r): (r.num_computed_tokens, r.prompt_tokens, r.num_output_tokens)
            for r in self.scheduler.running
        }
        end = _orig(self, now)
        if self._step is not None:
            s, e, batch = self._step
            reqs = []
            for req, n in batch.entries:
                c, p, o = before.get(
                    id(req), (req.num_computed_tokens, req.prompt_tokens, req.num_output_tokens)
                )
                reqs.append([n, c, p, o])
            if reqs:
                _fh.write(
                    json.dumps(
                        {
                            "ts": time.time(),
                            "engine_s": s,
                            "dur": e - s,
                            "r": reqs,
                            "waiting": len(self.scheduler.waiting),
                        }
                    )
                    + "\n"
                )
        return end

    _core.EngineCore.begin_step = begin_step
