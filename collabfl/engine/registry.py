"""The method registry: every method the runtimes can run, registered once.

An entry is a name, the config section that a spec's bare ``name:key=value`` options go to,
a builder (the resolved spec and the federation → a ``strategies`` Method) and whether a
coalition method may run it inside a coalition. Config validation, spec parsing, the command
line and both runtimes read the registry, so adding a method is one entry.

The built-in methods are the rows of ``engine/builtin_methods.py`` (data: a builder of
``engine/builders.py`` by name), registered when this module is imported, so ``config.py``
can validate method names without importing any strategy; ``build_method`` in
``engine/builders.py`` builds them. A method registered at run time gives its builder itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from collabfl.engine.builtin_methods import BUILTINS, BuiltBy, Builtin

if TYPE_CHECKING:
    from collabfl.kernel.flat import FlatModel
    from collabfl.strategies.rounds import Method


@dataclass(frozen=True)
class FederationContext:
    """What a builder may know about the federation its method will run on."""

    sample_counts: Mapping[int, int]
    """Training samples per client id."""
    workspace: FlatModel
    """Holds the shared initial model (read it; methods must not change it)."""
    reported: Mapping[int, Mapping[str, float]] = field(default_factory=dict)
    """What clients reported about themselves when they joined (iPFL cost and eagerness)."""


Builder = Callable[..., "Method"]
"""(resolved spec, federation) → a configured Method; raise ConfigError for a bad combination.

The spec is engine/methods.py's ``MethodSpec``, a level above: config.py reads this registry
to check method names, so the registry names no type of config's or of the methods'."""


@dataclass(frozen=True)
class MethodEntry:
    """One registered method."""

    name: str
    build: Builder | BuiltBy
    """The builder, or for a built-in method the builder of engine/builders.py it names."""
    section: str | None = None
    """The ExperimentConfig section of the method's knobs (``dpfl:budget=5`` sets
    ``dpfl.budget``), or None when bare options make no sense for it."""
    coalition_base: bool = False
    """Whether FedCollab and the equilibrium may run it inside a coalition."""
    summary: str = ""
    """One line on what the method does, for `collabfl methods`."""
    quorum: int = 1
    """The fewest participants a round of it is worth running with (a method that learns
    from peers needs 2): a federated run's default ``federation.quorum``."""
    cost: float = 1.0
    """Compute per round relative to Local's, roughly: `compare` starts its parallel
    workers on the costliest methods first, so the longest one does not start last."""


class MethodRegistry:
    """Method entries by name, in registration order (the order choices are listed in)."""

    def __init__(self, builtins: tuple[Builtin, ...] = ()) -> None:
        self._entries: dict[str, MethodEntry] = {}
        for row in builtins:
            self.register(
                row.name,
                row.build,
                section=row.section,
                coalition_base=row.coalition_base,
                summary=row.summary,
                quorum=row.quorum,
                cost=row.cost,
            )

    def register(
        self,
        name: str,
        build: Builder | BuiltBy,
        *,
        section: str | None = None,
        coalition_base: bool = False,
        summary: str = "",
        quorum: int = 1,
        cost: float = 1.0,
    ) -> None:
        """Add a method; a name can be registered once (unregister it first to replace it)."""
        entries = self._entries
        if name in entries:
            raise ValueError(f"method {name!r} is already registered")
        if not name or not name.replace("_", "").isalnum():
            raise ValueError(f"method name {name!r} must be letters, digits and underscores")
        if quorum < 1:
            raise ValueError(f"method {name!r}: quorum must be >= 1, got {quorum}")
        if not cost > 0:
            raise ValueError(f"method {name!r}: cost must be > 0, got {cost}")
        entries[name] = MethodEntry(name, build, section, coalition_base, summary, quorum, cost)

    def unregister(self, name: str) -> None:
        del self._entries[name]

    def entry(self, name: str) -> MethodEntry:
        """The entry of a registered method (check ``name in registry`` for user input)."""
        return self._entries[name]

    def names(self, *, coalition_base: bool = False) -> tuple[str, ...]:
        """Registered names; with ``coalition_base``, only those a coalition may run."""
        entries = self._entries.values()
        return tuple(e.name for e in entries if e.coalition_base or not coalition_base)

    def choices(self, *, coalition_base: bool = False) -> str:
        """The names as an error message lists them."""
        return ", ".join(self.names(coalition_base=coalition_base))

    def __contains__(self, name: object) -> bool:
        return name in self._entries


REGISTRY = MethodRegistry(BUILTINS)
"""The registry every runtime, the config and the command line read, the built-in methods in it."""
