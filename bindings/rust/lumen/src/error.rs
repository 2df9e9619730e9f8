use std::ffi::CStr;
use std::fmt;

use crate::sys;

/// A failed lumen call: its `lumen_status` and the library's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    status: i32,
    message: String,
}

/// `Result` with lumen's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error raised by these bindings before reaching the library (e.g. a path with a NUL).
    pub(crate) fn invalid_argument(message: impl Into<String>) -> Error {
        Error { status: sys::LUMEN_ERROR_INVALID_ARGUMENT as i32, message: message.into() }
    }

    /// A layer index outside the model, reported as the library does.
    pub(crate) fn out_of_range(layer: i32, layers: usize) -> Error {
        Error {
            status: sys::LUMEN_ERROR_OUT_OF_RANGE as i32,
            message: format!("layer {} is out of range: the model has {} layers", layer, layers),
        }
    }

    /// The `lumen_status` code (`sys::LUMEN_ERROR_*`).
    pub fn status(&self) -> i32 {
        self.status
    }

    /// The status's name, e.g. "LUMEN_ERROR_OUT_OF_RANGE".
    pub fn status_name(&self) -> String {
        // SAFETY: lumen_status_string returns a static string for any value.
        unsafe { CStr::from_ptr(sys::lumen_status_string(self.status)) }
            .to_string_lossy()
            .into_owned()
    }

    /// The library's message for the failed call.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status_name(), self.message)
    }
}

impl std::error::Error for Error {}

/// Turns a status into a Result, reading the calling thread's message on failure.
pub(crate) fn check(status: sys::lumen_status) -> Result<()> {
    if status == sys::LUMEN_OK {
        return Ok(());
    }
    // SAFETY: the message is valid until this thread's next fallible lumen call; copied now.
    let message = unsafe { CStr::from_ptr(sys::lumen_last_error_message()) }
        .to_string_lossy()
        .into_owned();
    Err(Error { status: status as i32, message })
}
