"""The sample Hudi tables written by Spark with Hudi (test data kept beside the checkout, see
SAMPLES): `sample` unzips one, `Timeline` shows its instants one by one as their writers made
them, and the steps each sample's instants took (`TXNS_*`, applied with `_apply`)."""

import shutil
import zipfile
from pathlib import Path

from inventory.sources import hudi as hudi_source

# beside the repository (<repo>/../shared, as CI lays it), or beside a folder above it (a git
# worktree of the repository)
SAMPLES = next(
    (
        folder / "shared" / "data" / "hudi"
        for folder in Path(__file__).resolve().parents[3:]
        if (folder / "shared" / "data" / "hudi").is_dir()
    ),
    Path(__file__).resolve().parents[3] / "shared" / "data" / "hudi",
)


def sample(tmp_path: Path, name: str) -> Path:
    """The sample table `name` (its path under SAMPLES, without .zip) unzipped under tmp_path."""
    target = tmp_path / "tables" / name.replace("/", "-")
    with zipfile.ZipFile(SAMPLES / f"{name}.zip") as archive:
        archive.extractall(target)
    [table] = [p.parent.parent for p in target.glob("*/.hoodie/hoodie.properties")]
    return table


class Timeline:
    """A copy of a sample table shown as its writers made it: every instant after the first
    `shown` ones is held outside the table and brought back, all its files at once, by
    `advance()`, as a writer completing it would."""

    def __init__(self, table: Path, shown: int = 0):
        self.folder = table / ".hoodie" / "timeline"
        self.held = table.parent / "held"
        self.held.mkdir()
        stamps = sorted({f.name.split(".")[0].split("_")[0] for f in self.folder.iterdir()})
        self.stamps = [s for s in stamps if s.isdigit()]
        for stamp in self.stamps:
            for file in self.folder.glob(f"{stamp}*"):
                shutil.move(file, self.held / file.name)
        self.writes = [s for s in self.stamps if self._is_write(s)]
        for _ in range(shown):
            self.advance()

    def _is_write(self, stamp: str) -> bool:
        return any(
            f.name.split(".")[-1] in hudi_source.WRITE_ACTIONS for f in self.held.glob(f"{stamp}_*")
        )

    def advance(self) -> str:
        """Bring back the next write instant (and the table services before it)."""
        stamp = next(s for s in self.stamps if any(self.held.glob(f"{s}*")))
        for file in self.held.glob(f"{stamp}*"):
            shutil.move(file, self.folder / file.name)
        return stamp if stamp in self.writes else self.advance()


REGION = {
    **dict.fromkeys(["TXN-001", "TXN-002", "TXN-003", "TXN-013", "TXN-014", "TXN-017"], "us"),
    **dict.fromkeys(["TXN-004", "TXN-005", "TXN-006", "TXN-009", "TXN-010"], "eu"),
    **dict.fromkeys(["TXN-011", "TXN-012", "TXN-018"], "eu"),
    **dict.fromkeys(["TXN-007", "TXN-008", "TXN-015", "TXN-016"], "apac"),
}


def _ts(key: str, base: int) -> int:
    return base + int(key[4:])


def _rows(base: int, *keys: str) -> dict:
    return {key: _ts(key, base) for key in keys}


# each step: (what the instant's own batch reads, keys deleted, region overwritten or None)
TXNS_SIMPLE_META = [
    (_rows(1700000000000, *[f"TXN-00{i}" for i in range(1, 9)]), (), None),  # insert
    (_rows(1700100000000, "TXN-001"), (), None),  # update
    ({}, ("TXN-002",), None),  # delete
    (_rows(1700200000000, "TXN-005"), (), None),  # update
    ({}, ("TXN-005",), None),  # delete after the update
    (_rows(1700300000000, "TXN-007"), (), None),  # update
    (_rows(1700400000000, "TXN-009", "TXN-010"), (), None),  # insert into eu
    (_rows(1700500000000, "TXN-011", "TXN-012"), (), "eu"),  # insert overwrite of eu
    (_rows(1700600000000, "TXN-013", "TXN-014"), (), None),
    (_rows(1700700000000, "TXN-015", "TXN-016"), (), None),
    ({}, (), None),  # clustering
    (_rows(1700800000000, "TXN-017", "TXN-018"), (), None),
]
TXNS_NONPART_META = [
    *TXNS_SIMPLE_META[:7],
    (_rows(1700500000000, "TXN-011", "TXN-012"), (), None),  # an insert, no overwrite here
    (_rows(1700600000000, "TXN-013", "TXN-014"), (), None),
    ({}, (), None),  # clustering
    (_rows(1700700000000, "TXN-015", "TXN-016"), (), None),
]
COMPACTION = ({}, (), None)
TXNS_SIMPLE_META_MOR = [*TXNS_SIMPLE_META[:10], COMPACTION, *TXNS_SIMPLE_META[10:]]


def _apply(state: dict, step) -> dict:
    changed, deleted, overwritten = step
    if overwritten:
        state = {k: v for k, v in state.items() if REGION[k] != overwritten}
    state = {k: v for k, v in state.items() if k not in deleted}
    return {**state, **changed}
