use std::ffi::CStr;
use std::fmt;

use crate::sys;

/// The statuses of `lumen_status` and the `Status` variant of each, with the header's meaning.
macro_rules! statuses {
    ($($(#[$doc:meta])* $variant:ident = $code:ident,)*) => {
        /// Why a lumen call failed: one variant for each `LUMEN_ERROR_*` of `lumen.h`.
        ///
        /// The header appends new codes; a code this version of the crate does not know comes
        /// as [`Status::Unknown`], and a later version may give it a variant of its own (so
        /// the enum is `non_exhaustive`).
        #[non_exhaustive]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Status {
            $($(#[$doc])* #[doc = concat!("(`", stringify!($code), "`)")] $variant,)*
            /// A code the header did not have when this crate was written (a newer library).
            Unknown(sys::lumen_status),
        }

        impl Status {
            /// The status of a code (`sys::LUMEN_ERROR_*`); `None` for `LUMEN_OK`.
            pub fn from_code(code: sys::lumen_status) -> Option<Status> {
                match code {
                    sys::LUMEN_OK => None,
                    $(sys::$code => Some(Status::$variant),)*
                    other => Some(Status::Unknown(other)),
                }
            }

            /// The raw code, of the sys constants' own type: `status.code() ==
            /// sys::LUMEN_ERROR_IO` needs no cast.
            pub fn code(self) -> sys::lumen_status {
                match self {
                    $(Status::$variant => sys::$code,)*
                    Status::Unknown(code) => code,
                }
            }
        }
    };
}

statuses! {
    /// An argument is NULL, out of range, inconsistent, or a buffer has the wrong size.
    InvalidArgument = LUMEN_ERROR_INVALID_ARGUMENT,
    /// A layer index is outside the model.
    OutOfRange = LUMEN_ERROR_OUT_OF_RANGE,
    /// A session belongs to another engine or model than the call needs.
    ModelMismatch = LUMEN_ERROR_MODEL_MISMATCH,
    /// Memory could not be allocated.
    OutOfMemory = LUMEN_ERROR_OUT_OF_MEMORY,
    /// The request is valid but this build or backend cannot do it (e.g. CUDA not built).
    Unsupported = LUMEN_ERROR_UNSUPPORTED,
    /// The backend (a device runtime) failed.
    Backend = LUMEN_ERROR_BACKEND,
    /// A bug in lumen: please report it with the message.
    Internal = LUMEN_ERROR_INTERNAL,
    /// A caller buffer is smaller than the result.
    BufferTooSmall = LUMEN_ERROR_BUFFER_TOO_SMALL,
    /// Snapshot bytes are truncated, damaged or not a lumen snapshot.
    CorruptSnapshot = LUMEN_ERROR_CORRUPT_SNAPSHOT,
    /// A snapshot was written in a newer format version than this library reads.
    SnapshotVersion = LUMEN_ERROR_SNAPSHOT_VERSION,
    /// A file could not be opened, read, written, flushed or renamed.
    Io = LUMEN_ERROR_IO,
    /// A store holds no value under the key (since 0.3).
    NotFound = LUMEN_ERROR_NOT_FOUND,
    /// A save's expected version is not the stored one: another writer saved first (since 0.3).
    VersionConflict = LUMEN_ERROR_VERSION_CONFLICT,
    /// A store's server cannot be reached, or closed the connection (since 0.3).
    Unavailable = LUMEN_ERROR_UNAVAILABLE,
    /// A store's server did not answer in time (since 0.3).
    Timeout = LUMEN_ERROR_TIMEOUT,
    /// The session holds tentative tokens: commit them first (since 0.4).
    UncommittedTokens = LUMEN_ERROR_UNCOMMITTED_TOKENS,
}

impl Status {
    /// The library's name of the status, e.g. "LUMEN_ERROR_OUT_OF_RANGE"
    /// ("LUMEN_ERROR_UNKNOWN_STATUS" for a code the loaded library does not know).
    pub fn name(self) -> &'static str {
        // The header's codes fit in i32 (the argument's type), and so does any code the
        // library returns; a larger value is no status, which the library names as such.
        let code = i32::try_from(self.code()).unwrap_or(i32::MAX);
        // SAFETY: lumen_status_string returns a static NUL-terminated string for any value.
        unsafe { CStr::from_ptr(sys::lumen_status_string(code)) }
            .to_str()
            .unwrap_or("LUMEN_ERROR_UNKNOWN_STATUS")
    }
}

impl fmt::Display for Status {
    /// The library's name of the status.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failed lumen call: its [`Status`] and the library's message. `Display` shows both,
/// e.g. "LUMEN_ERROR_OUT_OF_RANGE: layer 7 is out of range: the model has 2 layers".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
}

/// `Result` with lumen's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error raised by these bindings before reaching the library (e.g. a path with a NUL).
    pub(crate) fn invalid_argument(message: impl Into<String>) -> Error {
        Error { status: Status::InvalidArgument, message: message.into() }
    }

    /// A layer index outside the model, reported as the library does.
    pub(crate) fn out_of_range(layer: i32, layers: usize) -> Error {
        Error {
            status: Status::OutOfRange,
            message: format!("layer {} is out of range: the model has {} layers", layer, layers),
        }
    }

    /// Why the call failed.
    pub fn status(&self) -> Status {
        self.status
    }

    /// The raw `lumen_status` code, comparable with `sys::LUMEN_ERROR_*` as is.
    pub fn code(&self) -> sys::lumen_status {
        self.status.code()
    }

    /// The library's message for the failed call.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status, self.message)
    }
}

impl std::error::Error for Error {}

/// Turns a status into a Result, reading the calling thread's message on failure.
pub(crate) fn check(code: sys::lumen_status) -> Result<()> {
    let status = match Status::from_code(code) {
        Some(status) => status,
        None => return Ok(()),
    };
    // SAFETY: the message is valid until this thread's next fallible lumen call; copied now.
    let message = unsafe { CStr::from_ptr(sys::lumen_last_error_message()) }
        .to_string_lossy()
        .into_owned();
    Err(Error { status, message })
}
