"""What every `fleet` command shares: how an error is reported, the --db option, and the
harness's options (one spelling of a benchmark for `fleet bench`, `probe` and `sweep`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import wraps
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console

from agent.matmul.harness import DEFAULT_DTYPE, DEFAULT_SIZE, DTYPES
from fleet.errors import FleetError, InputError
from fleet.probe.local import SUITES, BenchOptions
from fleet.probe.run import DEFAULT_PARALLEL

if TYPE_CHECKING:
    from fleet.api import Store

F = TypeVar("F", bound=Callable[..., Any])
# Not highlighted: what hosts send is printed through it, and should read as plain text.
err_console = Console(stderr=True, highlight=False)


def reports_errors(func: F) -> F:
    """Turn a FleetError into its message on stderr and its exit status."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except FleetError as exc:
            err_console.print(f"[red]Error:[/red] {exc}", markup=True, highlight=False,
                              soft_wrap=True)
            sys.exit(exc.exit_code)

    return wrapper  # type: ignore[return-value]


db_option = click.option(
    "--db", "db", metavar="URL",
    help="sqlite:///path/fleet.db, a file path, or postgresql://user@host:5432/name. "
         "Default: $FLEET_DB, else ~/.local/share/fleet/fleet.db "
         "(under $XDG_DATA_HOME when set).")


def existing_store(db: str | None) -> Store:
    """The store `db` names, for a command that only reads it: refused where it is a
    SQLite file that is not there, since opening it would create an empty store and a
    mistyped --db would then read as a fleet with nothing wrong."""
    from fleet.api import Store  # the store's modules load with the command that reads it

    store = Store(db)
    path = store.location.sqlite_path
    if path is not None and not path.exists():
        raise InputError(f"no fleet database at {store.location}: give --db (or $FLEET_DB) "
                         "the store `fleet probe`, `fleet sweep` or `fleet ingest` wrote; "
                         "`fleet db current` says which one is the default")
    return store


def note_created(store_created: bool, location: object) -> None:
    """Say so on stderr when opening the store created it."""
    if store_created:
        err_console.print(f"Created the fleet database at {location}", markup=False)


def _gpu_list(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        return tuple(int(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r}: give GPU indexes separated by commas, e.g. 0,2") \
            from None


# The harness's options, shared by `fleet bench` (this machine) and `fleet probe` (every
# host), so that both spell a benchmark the same way.
HARNESS_OPTIONS = (
    click.option("--dtype", type=click.Choice(DTYPES),
                 default=DEFAULT_DTYPE, show_default=True,
                 help="fp32 means CUDA cores; tf32 the tensor cores' TF32 mode."),
    click.option("--size", type=click.IntRange(1, 65536), default=DEFAULT_SIZE,
                 show_default=True,
                 help="M = N = K."),
    click.option("-m", type=click.IntRange(1, 1 << 20), help="M, overriding --size."),
    click.option("-n", type=click.IntRange(1, 1 << 20), help="N, overriding --size."),
    click.option("-k", type=click.IntRange(1, 1 << 20), help="K, overriding --size."),
    click.option("--pause-ms", type=click.FloatRange(0, 10_000),
                 help="Burst mode: pause this long between timed runs (default: sustained, "
                      "back to back, what a training job sees)."),
    click.option("--quick", is_flag=True,
                 help="The cool-start figure: warm up until 1-s windows agree, then measure "
                      "(under 20 s a GPU), as every result before harness 1.3. Reads high on "
                      "a card that heats (the lent H100s' first 20 s of load were 0.4-1.8% "
                      "above their soaked level). Labelled "
                      "\"cool-start\" and compared apart from soaked results."),
    click.option("--soak-cap-s", type=click.FloatRange(10, 3600), metavar="S",
                 help="Stop waiting for throughput and temperature to stop moving after S "
                      "seconds of load, measure anyway and flag the result not_soaked "
                      "(harness default 180). The job suite's training step takes the "
                      "same cap."),
    click.option("--warm-l2", is_flag=True, help="Do not flush the L2 cache before each run."),
    click.option("--sequential", is_flag=True,
                 help="One GPU at a time (default: all at once, the node under full load)."),
    click.option("--gpus", callback=_gpu_list, help="Only these GPU indexes, e.g. 0,2."),
    click.option("--flush-always", is_flag=True,
                 help="Flush the L2 before every run even where the matrices together "
                      "outsize the flush buffer (default: only where they are smaller, or "
                      "in burst mode; larger ones evict it themselves, and the flush only "
                      "changes the card's power pattern). Results say \"flushed\" L2 and "
                      "are compared apart."),
    # Harness 1.1's opt-in, the default since 1.2: still accepted so that installed
    # schedules and scripts keep working.
    click.option("--flush-auto", is_flag=True, hidden=True),
    # The harness's own defaults (agent/matmul/harness.py, measured in bench/RESULTS.md) apply
    # unless these are given, so the agent alone and fleet measure alike.
    click.option("--measure-s", type=click.FloatRange(0.1, 600),
                 help="Measure this long once soaked (harness default 20 s); with --quick, "
                      "at least this long after warm-up (default 6 s)."),
    click.option("--max-warmup-s", type=click.FloatRange(0.1, 600),
                 help="--quick: give up waiting for steady state after this long, flagging "
                      "the result not_steady (harness default 10.5 s)."),
    click.option("--max-total-s", type=click.FloatRange(0.1, 3600),
                 help="--quick: stop extending a measurement whose sub-windows disagree once "
                      "the run on a GPU has lasted this long (harness default 18 s)."),
    click.option("--lock-clocks", type=click.IntRange(1, 10_000), metavar="MHZ",
                 help="Lock the SM clock for the run (changes a GPU setting, needs root; "
                      "reset afterwards, and results are marked locked)."),
    click.option("--cpu", is_flag=True, help="Run the harness on the CPU (a smoke test)."),
    click.option("--gemm-only", is_flag=True,
                 help="The matmul alone: skip the node suite and the job suite that follow "
                      "it (as --suite gemm)."),
    click.option("--suite", type=click.Choice(SUITES),
                 help="all (the default): the matmul, then the job suite (a "
                      "transformer's training step and decode on every GPU at once, about "
                      "a minute, half of it its soak), then the node suite (each GPU's "
                      "memory and host link, each pair's copies, the node's all-reduce; "
                      "6-25 s); gemm: the matmul alone; node: the node suite alone; job: "
                      "the job suite alone (its soak takes up to 3 minutes, as the "
                      "matmul's)."),
    click.option("--job-compile", is_flag=True,
                 help="Measure the job suite's training step and decode under "
                      "torch.compile too, beside eager, each with the backend the eager "
                      "figures made fastest, gated against float32 as the backends are; "
                      "compile times are recorded apart, compiled and eager figures are "
                      "compared apart, the faster the headline (decode's latency point "
                      "+18% on a lent H200). Cold compiles take 20-40 s a GPU: past the "
                      "stage's minute, so not by default."),
)


def harness_options(func: F) -> F:
    """Decorate a command with the benchmark harness's options (HARNESS_OPTIONS)."""
    for option in reversed(HARNESS_OPTIONS):
        func = option(func)
    return func


@dataclass(frozen=True)
class HarnessArgs:
    """The values of HARNESS_OPTIONS as click gives them, by the options' names."""

    dtype: str
    size: int
    m: int | None
    n: int | None
    k: int | None
    pause_ms: float | None
    quick: bool
    soak_cap_s: float | None
    warm_l2: bool
    sequential: bool
    gpus: tuple[int, ...] | None
    flush_always: bool
    flush_auto: bool
    measure_s: float | None
    max_warmup_s: float | None
    max_total_s: float | None
    lock_clocks: int | None
    cpu: bool
    gemm_only: bool
    suite: str | None
    job_compile: bool

    def bench_options(self) -> BenchOptions:
        """What the harness is asked to run; contradicting flush choices are refused."""
        given = [flag for flag, on in (("--warm-l2", self.warm_l2),
                                       ("--flush-always", self.flush_always),
                                       ("--flush-auto", self.flush_auto)) if on]
        if len(given) > 1:
            raise InputError(f"{' and '.join(given)} contradict each other: --warm-l2 never "
                             "flushes the L2, --flush-always flushes it before every run, "
                             "and --flush-auto (the default) flushes it only for problems "
                             "smaller than the flush buffer; give one")
        if self.suite is not None and self.gemm_only and self.suite != "gemm":
            raise InputError(f"--gemm-only and --suite {self.suite} contradict each other: "
                             "give one")
        if self.job_compile and (self.suite in ("gemm", "node") or self.gemm_only):
            raise InputError("--job-compile asks for the job suite, which --gemm-only or "
                             f"--suite {self.suite or 'gemm'} leaves out: drop one")
        return BenchOptions(
            dtype=self.dtype, m=self.m or self.size, n=self.n or self.size,
            k=self.k or self.size, pause_ms=self.pause_ms, quick=self.quick,
            soak_cap_s=self.soak_cap_s, warm_l2=self.warm_l2,
            flush_always=self.flush_always, sequential=self.sequential, gpus=self.gpus,
            measure_s=self.measure_s, max_warmup_s=self.max_warmup_s,
            max_total_s=self.max_total_s, lock_clocks_mhz=self.lock_clocks, cpu=self.cpu,
            suite=self.suite or ("gemm" if self.gemm_only else "all"),
            job_compile=self.job_compile)


_HARNESS_NAMES = frozenset(f.name for f in fields(HarnessArgs))
A = TypeVar("A")


def gathered(kind: type[A]) -> Callable[[Callable[[A], None]], Callable[..., None]]:
    """Hand a command its options as one `kind` (a dataclass whose fields are the options'
    names) instead of a dozen keyword arguments; a `harness` field gets the harness's
    options as HarnessArgs."""

    def decorate(command: Callable[[A], None]) -> Callable[..., None]:
        @wraps(command)
        def given(**values: Any) -> None:
            if any(f.name == "harness" for f in fields(kind)):  # type: ignore[arg-type]
                harness = HarnessArgs(**{n: values.pop(n) for n in _HARNESS_NAMES})
                values["harness"] = harness
            command(kind(**values))

        return given

    return decorate


def probe_options(via_local: str = "") -> Callable[[F], F]:
    """The options `fleet probe` and `fleet sweep` share, spelled once; `via_local` is
    added to the help of those that only apply when this machine does the probing."""
    shared = (
        click.option("--parallel", type=click.IntRange(1, 1024), default=DEFAULT_PARALLEL,
                     show_default=True, help=f"How many hosts to probe at once{via_local}."),
        click.option("--fingerprint-only", is_flag=True,
                     help="Only fingerprint; do not run the benchmark."),
        click.option("--accept-new-host-keys", is_flag=True,
                     help="Trust the key of a host seen for the first time and record it in "
                          f"fleet's known_hosts (a changed key is still refused){via_local}."),
        click.option("--timeout", type=click.FloatRange(1, 7 * 86400), metavar="S",
                     help="Stop a host's agent after S seconds. Default: 300 s to "
                          "fingerprint, plus 120 s per GPU (from `expect: gpu_count`, else "
                          "8) to benchmark."),
    )

    def decorate(func: F) -> F:
        for option in reversed(shared):
            func = option(func)
        return func

    return decorate
