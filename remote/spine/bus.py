"""Fan one event stream out to several consumers (TUI, headless printer, recorder).

Consumers are synchronous callbacks: the recorder must see every event, in order, before the
producer moves on; one that must not stall a job tail (the TUI) hands events to its own queue.
Nothing is dropped: the stream is the record of what happened.

A bus built with a `Redactor` (remote/spine/redact.py; every session the console opens, unless
`--no-redact`) masks secret shapes in each event before any consumer sees it: the recorder, the
printer and the TUI get the same masked event.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import suppress

from remote.spine import event_types as et
from remote.spine.events import Event, JobLines
from remote.spine.redact import Redactor

Callback = Callable[[Event], None]
BatchCallback = Callable[[Sequence[Event]], None]


class EventBus:
    def __init__(self, *, redactor: Redactor | None = None) -> None:
        self.redactor = redactor
        self._callbacks: list[Callback] = []
        self._batch_callbacks: list[BatchCallback] = []
        self.closed = False

    def add_callback(self, callback: Callback) -> Callable[[], None]:
        self._callbacks.append(callback)

        def remove() -> None:
            with suppress(ValueError):
                self._callbacks.remove(callback)

        return remove

    def add_batch_callback(self, callback: BatchCallback) -> Callable[[], None]:
        """Like add_callback, but events published together (publish_many: the lines of one
        block received from a job log) arrive in one call, so the recorder writes them with one
        write and one flush instead of one per line."""
        self._batch_callbacks.append(callback)

        def remove() -> None:
            with suppress(ValueError):
                self._batch_callbacks.remove(callback)

        return remove

    def _redacted(self, event: Event) -> Event:
        assert self.redactor is not None
        payload = self.redactor.value(event.payload)
        return event if payload is event.payload else Event(event.kind, event.host, payload,
                                                             event.ts)

    def _redacted_many(self, events: Sequence[Event]) -> Sequence[Event]:
        assert self.redactor is not None
        if isinstance(events, JobLines):  # a log block: one scan, rebuilt only on a hit
            texts = self.redactor.lines(events.texts)
            # What the lines share too: a run named after a secret by an older console.
            run_id, name = self.redactor.text(events.run_id), self.redactor.text(events.name)
            if texts is None and run_id is events.run_id and name is events.name:
                return events
            return events.with_texts(events.texts if texts is None else texts, run_id=run_id,
                                     name=name)
        return [self._redacted(e) for e in events]

    def publish(self, event: Event) -> Event:
        """Fan `event` out; returns it as the consumers saw it (masked when redacting)."""
        if self.closed:
            raise RuntimeError("publish on a closed event bus")
        if self.redactor is not None:
            event = self._redacted(event)
        for callback in list(self._callbacks):
            callback(event)
        for batch_callback in list(self._batch_callbacks):
            batch_callback((event,))
        return event

    def publish_many(self, events: Sequence[Event]) -> None:
        if self.closed:
            raise RuntimeError("publish on a closed event bus")
        if not events:
            return
        if self.redactor is not None:
            events = self._redacted_many(events)
        for callback in list(self._callbacks):
            for event in events:
                callback(event)
        for batch_callback in list(self._batch_callbacks):
            batch_callback(events)

    def emit(self, kind: str, host: str = "", **payload: object) -> Event:
        """The keyword form of a producer: the fields are checked against the kind's schema
        (remote/spine/event_types.py; PayloadError when they do not match) before anyone sees them."""
        return self.publish(Event.checked(kind, host, dict(payload)))

    def post(self, data: et.Payload, host: str = "") -> Event:
        """The typed form of a producer: the payload is a schema struct already."""
        return self.publish(Event.of(data, host))

    def close(self) -> None:
        self.closed = True
