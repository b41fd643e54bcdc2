"""Helpers shared by tests in several folders (``forked``) are imported by name from this folder."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def pytest_terminal_summary(terminalreporter):
    """One line on the Docker tests (issue 48): how many ran, or that they skipped and why. They skip wherever no
    daemon answers or the image is not built, so a run that checked nothing about the image says so plainly."""
    counts: dict[str, int] = {}
    reasons: dict[str, int] = {}
    for outcome in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            if "docker" not in getattr(report, "keywords", {}):
                continue
            counts[outcome] = counts.get(outcome, 0) + 1
            if outcome == "skipped" and isinstance(report.longrepr, tuple):
                reason = str(report.longrepr[2]).removeprefix("Skipped: ")
                reasons[reason] = reasons.get(reason, 0) + 1
    if not counts:
        return
    parts = [f"{n} {outcome}" for outcome, n in counts.items() if outcome != "skipped"]
    parts += [f"{n} skipped: {reason}" for reason, n in reasons.items()]
    unexplained = counts.get("skipped", 0) - sum(reasons.values())
    parts += [f"{unexplained} skipped"] if unexplained else []
    terminalreporter.write_line(f"Docker tests (the evaluation image): {'; '.join(parts)}")
