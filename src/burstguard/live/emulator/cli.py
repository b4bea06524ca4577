"""CLI: `burstguard emulate` — an OpenAI-compatible server over the vLLM-like engine model."""

from __future__ import annotations

from typing import Annotated

import typer

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.profile import Profile
from burstguard.engine_options import engine_options
from burstguard.tokenizer import AUTO, CHOICE_HELP


@engine_options
def emulate(
    profile: Profile,
    engine_config: EngineConfig,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = 8000,
    speedup: Annotated[
        float, typer.Option(help="Run engine time X times faster than real time.")
    ] = 1.0,
    served_model_name: Annotated[
        str | None, typer.Option(help="Model name clients must send (default: the profile name).")
    ] = None,
    output_mean: Annotated[
        float, typer.Option(help="Mean output length when ignore_eos is false.")
    ] = 256.0,
    output_sigma: Annotated[
        float, typer.Option(help="Lognormal sigma of that length (0 = fixed).")
    ] = 0.8,
    seed: Annotated[int, typer.Option(help="Seed of the output-length model.")] = 0,
    tokenizer: Annotated[str, typer.Option(help=f"Prompt tokens: {CHOICE_HELP}.")] = AUTO,
) -> None:
    """Serve the engine model over the OpenAI API (latencies in engine time)."""
    import math

    import uvicorn

    from burstguard.core.engine.core import EngineCore
    from burstguard.errors import UserError
    from burstguard.live.emulator.lengths import OutputLengthModel
    from burstguard.live.emulator.server import EmulatorApp
    from burstguard.tokenizer import prompt_counter

    if not 0 < speedup < math.inf:  # nan and inf too
        raise UserError(f"--speedup must be a finite number > 0 (got {speedup:g})")
    core = EngineCore(engine_config, profile)
    counter = prompt_counter(tokenizer, profile.model_name)
    app = EmulatorApp(
        core, served_model_name or profile.name, speedup,
        OutputLengthModel(output_mean, output_sigma, seed), counter.count,
    ).build()  # fmt: skip
    print(f"burstguard emulator ({profile.name}, {speedup:g}x) on http://{host}:{port}; "
          f"prompt tokens: {counter.method}", flush=True)  # fmt: skip
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False,
                loop="uvloop", http="httptools")  # fmt: skip


def register(app: typer.Typer) -> None:
    """Adds emulate."""
    app.command()(emulate)
