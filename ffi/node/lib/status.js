'use strict';
// Generated from the Rust status table (ffi/src/status_table.rs) by tests/ffi_node.rs:
// do not edit; regenerate with SHMLIMIT_BLESS=1 cargo test --test ffi_node.
// [status, code, class, description] for every error the package raises.

module.exports = [
  [1, 'SHMLIMIT_NULL_POINTER', 'NullPointerError', "a required pointer argument was NULL"],
  [2, 'SHMLIMIT_BAD_UTF8', 'BadUtf8Error', "a limit name was not valid UTF-8"],
  [3, 'SHMLIMIT_INTERNAL', 'InternalError', "internal error (a bug in shmlimit was caught)"],
  [4, 'SHMLIMIT_BAD_LENGTH', 'BadLengthError', "a length argument was impossible"],
  [5, 'SHMLIMIT_MISALIGNED_POINTER', 'MisalignedPointerError', "a pointer argument was misaligned"],
  [6, 'SHMLIMIT_OUT_OF_RANGE', 'OutOfRangeError', "an index argument was out of range"],
  [100, 'SHMLIMIT_IO', 'IoError', "an operating-system call failed"],
  [101, 'SHMLIMIT_SYMLINK', 'SymlinkError', "the path is a symbolic link"],
  [102, 'SHMLIMIT_NOT_REGULAR_FILE', 'NotRegularFileError', "the path is not a regular file"],
  [103, 'SHMLIMIT_PERMISSION', 'PermissionDeniedError', "the file's owner or mode is not acceptable"],
  [104, 'SHMLIMIT_FOREIGN', 'ForeignFileError', "not a shmlimit file"],
  [105, 'SHMLIMIT_VERSION', 'VersionError', "incompatible file format version"],
  [106, 'SHMLIMIT_SIZE', 'SizeError', "the file's size disagrees with its header"],
  [107, 'SHMLIMIT_CORRUPT', 'CorruptFileError', "the file's header or definitions are corrupt"],
  [108, 'SHMLIMIT_NOT_INITIALIZED', 'NotInitializedError', "the file was never fully initialised"],
  [109, 'SHMLIMIT_CLOCK_MISMATCH', 'ClockMismatchError', "the file belongs to another time namespace"],
  [110, 'SHMLIMIT_DEFINITION_CONFLICT', 'DefinitionConflictError', "the file holds other limit definitions"],
  [111, 'SHMLIMIT_INVALID_PARAMETER', 'InvalidParameterError', "invalid limit definition or parameter"],
  [112, 'SHMLIMIT_UNKNOWN_LIMIT', 'UnknownLimitError', "no limit of that name"],
  [113, 'SHMLIMIT_ZERO_COST', 'ZeroCostError', "a cost must be at least 1"],
  [114, 'SHMLIMIT_COST_EXCEEDS_CAPACITY', 'CostExceedsCapacityError', "the cost exceeds the limit's capacity"],
  [115, 'SHMLIMIT_CORRUPT_STATE', 'CorruptStateError', "the limit's shared state is corrupt"],
  [116, 'SHMLIMIT_CLOCK_OUT_OF_RANGE', 'ClockOutOfRangeError', "the clock is outside the representable range"],
  [117, 'SHMLIMIT_TABLE_FULL', 'TableFullError', "the keyed limit's table is full"],
  [118, 'SHMLIMIT_INVALID_KEY', 'InvalidKeyError', "invalid key"],
  [119, 'SHMLIMIT_WRONG_KIND', 'WrongKindError', "the operation does not apply to this kind of limit"],
  [-1, 'SHMLIMIT_CLOSED', 'ClosedError', "the handle is closed"],
  ['PERMIT_UNAVAILABLE', 'SHMLIMIT_PERMIT_UNAVAILABLE', 'PermitUnavailableError', "no permit came within the timeout"],
];
