"""What a controller does when another one sharing its store commits (store.notify): what its own commits do."""

from __future__ import annotations

from collections.abc import Callable

from corral.controller.services import Services
from corral.store.notify import Change


def on_change_elsewhere(services: Services) -> Callable[[Change], None]:
    def heard(change: Change) -> None:
        if change.state:
            services.engine.wake()
            services.serving.wake()
            services.events.ring()
        services.relays.expect(change.dialing)
        if change.workers is None:
            services.signals.wake_all()
        else:
            services.signals.wake(change.workers)
        if change.settings:
            services.submit_settings.forget()

    return heard
