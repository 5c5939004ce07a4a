"""OpenTelemetry traces: a span per run, per phase and per model call (GenAI conventions).

Optional: without the ``otel`` extra every helper is a no-op. Spans carry ids, names, counts and
token usage, never note or prompt text (R21): no exception message or event is recorded either.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import structlog

log = structlog.get_logger(__name__)

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ModuleNotFoundError:  # the otel extra is not installed
    trace = None  # type: ignore[assignment]

TRACER = "dream_worker"
T = TypeVar("T")
# An OTLP export's time, retries included (the SDK's default is 10 s), unless
# OTEL_EXPORTER_OTLP_TRACES_TIMEOUT or OTEL_EXPORTER_OTLP_TIMEOUT says otherwise; the spans
# left at exit get as long, then the process ends (before, an unreachable endpoint held every
# command 8-10 s after its answer).
EXPORT_SECONDS = 2.0
_TIMEOUT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
_setup_lock = threading.Lock()
_configured: dict[str, bool] = {}


class SpanHandle:
    """What the hooks may record on a span; only numbers and short identifiers get through."""

    def __init__(self, span: Any = None) -> None:
        self.span = span

    def set(self, **attributes: str | int | float | bool | None) -> None:
        if self.span is not None:
            for key, value in attributes.items():
                if value is not None:
                    self.span.set_attribute(key.replace("__", "."), value)

    def phase_result(self, status: str, counters: Mapping[str, Any]) -> None:
        """A phase's status and its numeric counters (``dream.counter.<name>``)."""
        self.set(dream__phase__status=status)
        if self.span is not None:
            for name, value in counters.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    self.span.set_attribute(f"dream.counter.{name}", value)

    def failed(self, error_type: str) -> None:
        """A call that failed without raising through the span (a provider batch that expired,
        one that could not be checked): ``error.type`` and status ERROR, by type only."""
        if self.span is not None:
            self.span.set_attribute("error.type", error_type)
            self.span.set_status(Status(StatusCode.ERROR, error_type))

    def model_reply(self, reply: Any) -> None:
        """Usage and the answering model of one completed model call."""
        self.set(gen_ai__response__model=reply.model or None,
                 gen_ai__usage__input_tokens=int(reply.tokens_in),
                 gen_ai__usage__output_tokens=int(reply.tokens_out))


@contextmanager
def _span(name: str, kind: Any = None, **attributes: Any) -> Iterator[SpanHandle]:
    provider = trace.get_tracer_provider() if trace is not None else None
    if provider is None or isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        # Nothing would record it (no SDK provider is installed): skip the no-op span and its
        # context switch (20 µs each, a dozen per run). The caller's context, with any
        # propagated parent, stays current as it would under a non-recording span.
        yield SpanHandle()
        return
    tracer = provider.get_tracer(TRACER)
    # Exceptions are recorded by type only: their messages may quote note text.
    with tracer.start_as_current_span(
        name, kind=kind or SpanKind.INTERNAL, record_exception=False,
        set_status_on_exception=False,
    ) as span:
        handle = SpanHandle(span)
        handle.set(**attributes)
        try:
            yield handle
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__name__)
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise


def run_span(run_id: str) -> Any:
    """The whole in-process run: a GenAI memory operation on the scope's store."""
    return _span("update_memory dream", gen_ai__operation__name="update_memory",
                 gen_ai__provider__name="dream-worker", dream__run_id=run_id)


def phase_span(run_id: str, phase: str, scope_key: str) -> Any:
    return _span(f"dream.phase {phase}", dream__run_id=run_id, dream__phase=phase,
                 gen_ai__memory__store__id=scope_key)


def model_call_span(llm: Any, prompt_name: str) -> Any:
    """One question to the model (``chat {model}``, kind CLIENT); the reply adds usage."""
    model = str(getattr(llm, "model", "") or "unknown")
    provider = str(getattr(llm, "provider_name", "") or "unknown")
    return _span(f"chat {model}", SpanKind.CLIENT if trace is not None else None,
                 gen_ai__operation__name="chat", gen_ai__provider__name=provider,
                 gen_ai__system=provider, gen_ai__request__model=model,
                 dream__prompt__name=prompt_name)


def in_current_trace(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` for a worker thread, run under the caller's trace context (a phase's model calls
    fan out over a thread pool; their spans stay children of the phase span)."""
    if trace is None:
        return fn
    captured = otel_context.get_current()

    def run(*args: Any, **kwargs: Any) -> T:
        token = otel_context.attach(captured)
        try:
            return fn(*args, **kwargs)
        finally:
            otel_context.detach(token)

    return run


def configure_telemetry(app: Any) -> None:
    """Once per process: export spans as the standard OTEL_* variables say, and instrument
    Celery and this process's SQLAlchemy engine when those instrumentations are installed.

    Exporting starts only when OTEL_TRACES_EXPORTER or an OTLP endpoint is set (and
    OTEL_SDK_DISABLED is not true); a tracer provider installed by someone else (the
    ``opentelemetry-instrument`` launcher, a test) is kept.
    """
    if trace is None:
        return
    settings = app.settings
    with _setup_lock:
        if not _configured.get("provider") and not settings.otel_sdk_disabled:
            _configured["provider"] = True
            wanted = settings.otel_traces_exporter or (
                "otlp" if settings.otel_exporter_otlp_endpoint else None)
            if wanted and wanted != "none":
                try:
                    _install_provider(wanted)
                except Exception as exc:  # a bad OTEL_BSP_* or limit: the SDK refuses it
                    log.warning("telemetry.config_invalid", error_type=type(exc).__name__,
                                error=str(exc)[:200], hint="fix the OTEL_* variable; tracing "
                                "is off until then")
        if not _configured.get("instrumented"):
            _configured["instrumented"] = True
            try:
                _instrument(app)
            except Exception as exc:  # tracing must never stop a worker from working
                log.warning("telemetry.instrumentation_failed", error_type=type(exc).__name__)


def _install_provider(exporters: str) -> None:
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
    except ModuleNotFoundError:
        log.warning("telemetry.sdk_missing", hint="pip install 'dream-worker[otel]'")
        return
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return  # already configured by the launcher or the host application
    _one_line_sdk_warnings()
    # Resource.create reads OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES; the sampler and the
    # batch processor read OTEL_TRACES_SAMPLER* / OTEL_BSP_* themselves.
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        # Neither variable names the service: the SDK fills in "unknown_service:python", which
        # would win over a default merged beneath it.
        resource = resource.merge(Resource({"service.name": "dream-worker"}))
    # The SDK's own exit handler waits for the last export however long it retries.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    try:
        _add_exporters(provider, exporters)
    except Exception:
        provider.shutdown()  # the processors already started: their threads end
        raise
    trace.set_tracer_provider(provider)
    atexit.register(shutdown_within, provider, export_seconds())
    log.info("telemetry.configured", exporters=exporters)


def export_seconds() -> float:
    """How long an OTLP export may take: the SDK's variable when set, else ``EXPORT_SECONDS``."""
    for name in _TIMEOUT_VARS:
        if os.environ.get(name):
            try:
                return float(os.environ[name])
            except ValueError:
                break  # the SDK says so and uses its default
    return EXPORT_SECONDS


def shutdown_within(provider: Any, seconds: float) -> None:
    """At exit: the spans still queued are exported for at most ``seconds``, then the process
    ends whatever the exporter is doing (it retries an unreachable endpoint until its own
    timeout, which a collector that is down should not add to every command)."""
    ending = threading.Thread(target=provider.shutdown, name="otel-shutdown", daemon=True)
    ending.start()
    ending.join(seconds)


class _NoTraceback(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


class _ExportProblem(logging.Filter):
    """The OTLP exporter's retries of an endpoint that does not answer ("Transient error ...
    retrying in 1.14s" a few times, then "Failed to export spans batch ...") as one line naming
    the endpoint, at most once per ``QUIET_SECONDS``: a command says it once, and a worker that
    runs for weeks says it again when the collector goes down another day. What else the SDK
    says passes as it is."""

    RETRIES = ("Transient error", "Failed to export", "Shutdown in progress", "Exception while "
               "exporting")

    QUIET_SECONDS = 3600.0

    def __init__(self) -> None:
        super().__init__()
        self.endpoint = "the OTLP endpoint"
        self.said_at: float | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(self.RETRIES):
            return True
        if self.said_at is not None and record.created - self.said_at < self.QUIET_SECONDS:
            return False
        self.said_at = record.created
        record.msg, record.args = ("spans not exported: %s did not answer; check "
                                   "OTEL_EXPORTER_OTLP_ENDPOINT and the collector",
                                   (self.endpoint,))
        return True


EXPORT_PROBLEM = _ExportProblem()


def _one_line_sdk_warnings() -> None:
    """The SDK says what it made of a bad OTEL_* value ("Unable to parse value for
    OTEL_BSP_SCHEDULE_DELAY as integer. Defaulting to 5000.") with a traceback under it: one line
    on stderr instead, as every other warning of a command."""
    sdk = logging.getLogger("opentelemetry")
    if not any(isinstance(f, _NoTraceback) for h in sdk.handlers for f in h.filters):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        handler.addFilter(_NoTraceback())
        handler.addFilter(EXPORT_PROBLEM)
        sdk.addHandler(handler)
        sdk.propagate = False


def _add_exporters(provider: Any, exporters: str) -> None:
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    for name in (n.strip() for n in exporters.split(",")):
        if name == "console":
            # stderr: stdout is a command's answer (an export, the MCP protocol), which spans
            # printed between its lines would break.
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
        elif name == "otlp":
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )
            except ModuleNotFoundError:
                log.warning("telemetry.otlp_exporter_missing",
                            hint="pip install opentelemetry-exporter-otlp-proto-http")
                continue
            bounded = not any(os.environ.get(v) for v in _TIMEOUT_VARS)
            exporter = OTLPSpanExporter(timeout=EXPORT_SECONDS if bounded else None)
            EXPORT_PROBLEM.endpoint = str(getattr(exporter, "_endpoint", "") or
                                          EXPORT_PROBLEM.endpoint)
            provider.add_span_processor(BatchSpanProcessor(exporter))
        elif name:
            log.warning("telemetry.unknown_exporter", exporter=name, supported="otlp, console")


def _instrument(app: Any) -> None:
    try:
        from opentelemetry.instrumentation.celery import CeleryInstrumentor
    except ModuleNotFoundError:
        pass
    else:
        if not CeleryInstrumentor().is_instrumented_by_opentelemetry:
            CeleryInstrumentor().instrument()
    try:
        from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
    except ModuleNotFoundError:
        pass
    else:
        if not SQLAlchemyInstrumentor().is_instrumented_by_opentelemetry:
            # Statements only (the instrumentation never records bound parameters). Its declared
            # range stops below SQLAlchemy 2.1, whose engine events it uses are unchanged; the
            # integration test proves the spans on the version we run.
            SQLAlchemyInstrumentor().instrument(engine=app.engine, skip_dep_check=True)
