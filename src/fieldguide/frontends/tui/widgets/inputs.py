"""An Input whose editing keys keep their order with typed text.

Textual delivers printable keys straight to the focused Input but resolves its bindings
(ctrl+u, backspace, ...) only after the key has bubbled up, so in a burst of input (a paste
without bracketed paste, or `tmux send-keys C-u /tmp/x.json`) the text can land before the
edit. This Input runs its own bindings as the keys arrive.
Its cursor does not blink: nothing repaints while the user reads, which matters over SSH.
"""

from __future__ import annotations

from textual import events
from textual.widgets import Input


class OrderedInput(Input):
    async def _on_key(self, event: events.Key) -> None:
        bindings = self._bindings.key_to_bindings.get(event.key)
        if bindings and not event.is_printable:
            event.stop()
            event.prevent_default()
            await self.run_action(bindings[0].action)
            return
        await super()._on_key(event)

    def on_mount(self) -> None:
        self.cursor_blink = False  # a steady cursor: no repaints over SSH, and stable screenshots
