"""LoRA adapters over one base model: loaded slots, then local disk, then the artifact store.

Each adapter has a `fetch` that puts its peft directory on local disk (materialising it from the
store the first time) and returns the path and whether it came from the store. A request naming
an adapter starts that fetch at once in the background; the scheduler starts the request only
when the adapter is on disk and a slot is free or holds an adapter no running request uses (the
least recently used one is unloaded). Slots are peft adapters inside one `PeftModel`; a batch
mixes them row by row (`adapter_names`).
"""

import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shipyard.errors import NotFound

BASE = "__base__"  # peft's name for "no adapter" in a mixed batch


class AdapterSet:
    def __init__(
        self,
        model: Any,
        fetchers: dict[str, Callable[[], tuple[Path, bool]]] | None = None,
        max_loaded: int = 4,
        on_load: Callable[[str, str], None] | None = None,
    ) -> None:
        self.model = model  # becomes the PeftModel wrapping it at the first load
        self.fetchers = dict(fetchers or {})
        self.max_loaded = max(1, max_loaded)
        self.on_load = on_load or (lambda name, source: None)
        self.loaded: OrderedDict[str, None] = OrderedDict()  # least recently used first
        self._paths: dict[str, Path] = {}
        self._from_store: set[str] = set()  # fetched from the store, not loaded since
        self._errors: dict[str, str] = {}
        self._fetching: set[str] = set()
        self._lock = threading.Lock()

    def loaded_names(self) -> list[str]:
        """The adapters in slots now, least recently used first (any thread)."""
        with self._lock:
            return list(self.loaded)

    def names(self) -> list[str]:
        return sorted(self.fetchers)

    def check(self, name: str) -> None:
        if name not in self.fetchers:
            raise NotFound(f"model {name!r}: no adapter of that name on this replica")
        self.prepare(name)

    def prepare(self, name: str) -> None:
        """Start bringing the adapter to local disk, unless it is there or on its way."""
        with self._lock:
            if name in self._paths or name in self._fetching:
                return
            self._fetching.add(name)
            self._errors.pop(name, None)
        threading.Thread(target=self._fetch, args=(name,), daemon=True).start()

    def _fetch(self, name: str) -> None:
        try:
            path, fetched = self.fetchers[name]()
            with self._lock:
                self._paths[name] = path
                if fetched:
                    self._from_store.add(name)
        except Exception as exc:  # reported to the request that waits for it
            with self._lock:
                self._errors[name] = f"adapter {name!r} could not be fetched: {exc}"
        finally:
            with self._lock:
                self._fetching.discard(name)

    def error(self, name: str) -> str | None:
        with self._lock:
            return self._errors.get(name)

    def ready(self, name: str, busy: set[str]) -> bool:
        """Whether a request for `name` can start now without waiting for disk or a slot."""
        if name in self.loaded:
            return True
        with self._lock:
            on_disk = name in self._paths
        free = len(self.loaded) < self.max_loaded or any(n not in busy for n in self.loaded)
        return on_disk and free

    def ensure(self, name: str, busy: set[str]) -> None:
        """Load `name` into a slot (engine thread only; `ready` said yes)."""
        if name in self.loaded:
            with self._lock:
                self.loaded.move_to_end(name)
            return
        path = self._paths[name]
        if not hasattr(self.model, "peft_config"):
            from peft import PeftModel

            self.model = PeftModel.from_pretrained(self.model, str(path), adapter_name=name)
        else:
            self.model.load_adapter(str(path), adapter_name=name)
        self.model.train(False)
        with self._lock:
            self.loaded[name] = None
        # Unload after loading: peft keeps one adapter active, so it must never have none.
        while len(self.loaded) > self.max_loaded:
            victim = next(n for n in self.loaded if n not in busy and n != name)
            with self._lock:
                del self.loaded[victim]
            self.model.set_adapter(name)
            self.model.delete_adapter(victim)
        with self._lock:
            source = "store" if name in self._from_store else "disk"
            self._from_store.discard(name)
        self.on_load(name, source)

    def kwargs(self, names: list[str | None]) -> dict[str, Any]:
        """The forward arguments that give each row its own adapter (or none)."""
        if not hasattr(self.model, "peft_config"):
            return {}
        return {"adapter_names": [n or BASE for n in names]}
