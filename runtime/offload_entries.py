"""The saved storages of a tensor cache (:mod:`hector.offload`) in the offload store: one entry
each, in memory, being written, on disk, being read or loaded; found by alias, store key and
group."""

from __future__ import annotations

import itertools
from typing import Any

import torch

__all__ = ["Entry", "SavedEntries"]

#: A group of saved storages: (forward pass, scope opened in it).
Group = tuple[int, int]


class Entry:
    """One saved storage: in memory, being written, on disk, being read, or loaded."""

    __slots__ = (
        "id",
        "key",
        "nbytes",
        "device",
        "storage",
        "buffer",
        "state",
        "refs",
        "group",
        "wanted",
        "weak",
        "ptr",
        "orphaned",
        "phase",
        "shift",
    )

    def __init__(self, entry_id: int, nbytes: int, device: torch.device) -> None:
        self.id = entry_id
        self.key = 0
        self.nbytes = nbytes
        self.device = device
        self.storage: torch.UntypedStorage | None = None  # original memory, while held
        self.buffer: torch.Tensor | None = None  # uint8 host buffer of a read
        # memory | writing | stored | reading | loaded | failed | discarded (force-closed cache)
        self.state = "memory"
        self.refs = 0
        self.group: Group = (0, 0)
        self.wanted = False
        self.weak: Any = None
        self.ptr = 0
        self.orphaned = False  # its forward or backward raised: no step is waiting for it
        self.phase = 0  # address of the written bytes mod BLOCK (the store's file layout)
        self.shift = 0  # bytes from the read-back buffer's storage start to the object


class SavedEntries:
    """The entries of a cache's saved storages, indexed by what finds them: the memory they
    alias (device, address), their store key, their group and, for those whose write started,
    their group again (the only ones a read-ahead looks at, so a hook costs the same however
    many tensors a group keeps in memory); with the bytes each group offloaded."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self.aliases: dict[tuple[str, int], Entry] = {}
        self.by_key: dict[int, Entry] = {}
        self.groups: dict[Group, dict[int, Entry]] = {}
        self.offloaded: dict[Group, dict[int, Entry]] = {}
        self.group_offloaded: dict[Group, int] = {}  # bytes written per group
        self.largest_group = 0

    def live_alias(self, key: tuple[str, int]) -> Entry | None:
        """The entry of the storage still alive at ``key`` (device, address), if saved."""
        entry = self.aliases.get(key)
        if entry is not None and entry.weak is not None and not entry.weak.expired():
            return entry
        return None

    def new(self, storage: torch.UntypedStorage, nbytes: int, device: torch.device) -> Entry:
        """A fresh entry holding ``storage`` (not registered yet)."""
        entry = Entry(next(self._ids), nbytes, device)
        entry.ptr = storage.data_ptr()
        entry.weak = torch.multiprocessing.reductions.StorageWeakRef(storage)
        entry.storage = storage
        return entry

    def register(self, key: tuple[str, int], entry: Entry) -> None:
        """Find ``entry`` by its alias ``key`` and its group from now on."""
        self.aliases[key] = entry
        self.groups.setdefault(entry.group, {})[entry.id] = entry

    def writing(self, entry: Entry) -> None:
        """``entry``'s write started: find it by its key and among its group's offloaded."""
        self.by_key[entry.key] = entry
        group_bytes = self.group_offloaded.get(entry.group, 0) + entry.nbytes
        self.group_offloaded[entry.group] = group_bytes
        self.largest_group = max(self.largest_group, group_bytes)
        self.offloaded.setdefault(entry.group, {})[entry.id] = entry

    def unregister(self, e: Entry) -> None:
        """Forget ``e`` in its group and as an alias (its key stays until it is forgotten)."""
        group = self.groups.get(e.group)
        if group is not None:
            group.pop(e.id, None)
            if not group:
                del self.groups[e.group]
                self.group_offloaded.pop(e.group, None)
        offloaded = self.offloaded.get(e.group)
        if offloaded is not None and offloaded.pop(e.id, None) is not None and not offloaded:
            del self.offloaded[e.group]
        akey = (str(e.device), e.ptr)
        if self.aliases.get(akey) is e:
            del self.aliases[akey]

    def orphan_pass(self, pass_: int) -> None:
        """Pass ``pass_`` raised: mark its entries as awaited by no step."""
        for (p, _), group in self.groups.items():
            if p == pass_:
                for e in group.values():
                    e.orphaned = True

    def alive(self) -> int:
        """How many entries a step still waits for (not orphaned)."""
        return sum(not e.orphaned for group in self.groups.values() for e in group.values())

    def held_offloaded_bytes(self) -> int:
        """Bytes of offloaded entries now in memory: read back, being read, or kept (wanted)."""
        return sum(
            e.nbytes
            for entries in self.offloaded.values()
            for e in entries.values()
            if e.buffer is not None or (e.wanted and e.storage is not None)
        )

    def bytes_to_read(self, group: Group) -> int:
        """Bytes of ``group``'s offloaded entries on disk and not being read."""
        entries = self.offloaded.get(group, {}).values()
        return sum(e.nbytes for e in entries if e.state == "stored" and e.buffer is None)

    def discard(self) -> None:
        """Drop every entry (a force-closed cache): their handles now fail."""
        for group in self.groups.values():
            for e in group.values():
                e.state = "discarded"
                e.storage = None
                e.buffer = None
        self.groups.clear()
        self.offloaded.clear()
        self.group_offloaded.clear()
        self.aliases.clear()
        self.by_key.clear()
