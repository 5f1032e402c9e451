"""The exceptions servediff raises on purpose, and the exit code each maps to.

    ServediffError                 exit 1 unless a subclass says otherwise
    ├── InputError                 exit 2: the user's input is wrong
    │   ├── PlanError              plan TOML: syntax, unknown key, wrong type
    │   ├── CorpusError            corpus file missing, empty, bad row, duplicate tag
    │   ├── ScoreFileError         a `compare` input with no usable rows
    │   └── OutputDirError         output folder cannot be written
    ├── BundleError                exit 2: a run directory cannot be used
    │   ├── SchemaVersionError     a file written by an unknown schema version
    │   └── PlanMismatchError      a run directory locked under another plan
    ├── IntegrityError             exit 1: `verify` found files that changed
    ├── BusyMachineError           exit 3: the machine was not quiet for a cost load
    ├── DiskFullError              exit 4: a write found no space left (or over quota)
    └── EngineError                an engine failed; the runner records these
        ├── EngineStartError       never became ready
        │   └── EngineRefusedError exited with an error of its own first (a refused flag)
        └── EngineRequestError     a request failed or its response was unusable

The CLI turns each into one line on stderr and its exit code; nothing below the
CLI prints or exits.
"""

from __future__ import annotations


class ServediffError(Exception):
    exit_code = 1


class InputError(ServediffError):
    exit_code = 2


class PlanError(InputError):
    pass


class CorpusError(InputError):
    pass


class ScoreFileError(InputError):
    pass


class OutputDirError(InputError):
    pass


class BundleError(ServediffError):
    exit_code = 2


class SchemaVersionError(BundleError):
    pass


class PlanMismatchError(BundleError):
    pass


class IntegrityError(ServediffError):
    exit_code = 1


class BusyMachineError(ServediffError):
    exit_code = 3

    def __init__(self, message: str, gate: object = None) -> None:
        super().__init__(message)
        self.gate = gate  # the evidence.Gate that refused (recorded in the load record)


class DiskFullError(ServediffError):
    """No space left for a file servediff writes: the run stops there (the engine is
    stopped first), nothing half-written stays, and the same command resumes once
    space is freed."""

    exit_code = 4


class EngineError(ServediffError):
    pass


class EngineStartError(EngineError):
    pass


class EngineRefusedError(EngineStartError):
    """The engine exited with an error of its own before it was ready (a flag it refuses,
    a configuration it cannot serve): the configuration does not exist on this stack."""


class EngineRequestError(EngineError):
    """`status`: the HTTP status of an error response (None: no response came back);
    `timed_out`: no answer came in time; `stalled`: and the engine did no work while
    it was waited on (a hang, as opposed to an engine still busy at the bound)."""

    def __init__(self, message: str, status: int | None = None,
                 timed_out: bool = False, stalled: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.timed_out = timed_out
        self.stalled = stalled
