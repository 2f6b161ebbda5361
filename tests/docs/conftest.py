"""The run's summary names the documentation's sessions that are not run, and why (this file
is loaded only when tests/docs is collected)."""

from helpers.doc_sessions import all_blocks


def pytest_terminal_summary(terminalreporter):
    not_run = [b for b in all_blocks() if b.not_run is not None]
    if not_run:
        terminalreporter.section("documentation sessions not run")
        for block in not_run:
            terminalreporter.write_line(f"{block.name}: {block.not_run}")
