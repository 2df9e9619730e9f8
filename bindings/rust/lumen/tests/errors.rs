//! Failed calls as Rust errors: a `Status` for every `LUMEN_ERROR_*` of the header, the raw
//! code in the sys constants' own type, the library's message in `Display`.
use std::ffi::CStr;

use lumen::{sys, Error, Family, LayerOptions, ModelBuilder, Status};

/// The header's name of a code, e.g. "LUMEN_ERROR_IO".
fn header_name(code: sys::lumen_status) -> String {
    // SAFETY: lumen_status_string returns a static string for any value.
    unsafe { CStr::from_ptr(sys::lumen_status_string(code as i32)) }.to_string_lossy().into_owned()
}

fn failed_call() -> Error {
    let mut builder = ModelBuilder::new().unwrap();
    builder.add_layer(&LayerOptions::new(Family::GLA).heads(0).key_dim(4).value_dim(4)).unwrap_err()
}

#[test]
fn every_error_code_of_the_library_has_a_status() {
    // Codes are appended to lumen_status; the library names every one it has.
    let mut code: sys::lumen_status = sys::LUMEN_ERROR_INVALID_ARGUMENT;
    while header_name(code) != "LUMEN_ERROR_UNKNOWN_STATUS" {
        let status = Status::from_code(code).unwrap();
        assert!(!matches!(status, Status::Unknown(_)), "code {} ({}) has no variant", code,
                header_name(code));
        assert_eq!(status.code(), code);
        assert_eq!(status.name(), header_name(code));
        assert_eq!(status.to_string(), header_name(code));
        code += 1;
    }
    assert!(code > sys::LUMEN_ERROR_IO, "the library names only {} codes", code - 1);
    assert_eq!(Status::from_code(sys::LUMEN_OK), None);
    assert_eq!(Status::from_code(code), Some(Status::Unknown(code)));
    assert_eq!(Status::Unknown(code).code(), code);
    assert_eq!(Status::Unknown(code).name(), "LUMEN_ERROR_UNKNOWN_STATUS");
}

#[test]
fn statuses_match_the_sys_constants_without_casts() {
    let pairs = [
        (Status::InvalidArgument, sys::LUMEN_ERROR_INVALID_ARGUMENT),
        (Status::OutOfRange, sys::LUMEN_ERROR_OUT_OF_RANGE),
        (Status::ModelMismatch, sys::LUMEN_ERROR_MODEL_MISMATCH),
        (Status::OutOfMemory, sys::LUMEN_ERROR_OUT_OF_MEMORY),
        (Status::Unsupported, sys::LUMEN_ERROR_UNSUPPORTED),
        (Status::Backend, sys::LUMEN_ERROR_BACKEND),
        (Status::Internal, sys::LUMEN_ERROR_INTERNAL),
        (Status::BufferTooSmall, sys::LUMEN_ERROR_BUFFER_TOO_SMALL),
        (Status::CorruptSnapshot, sys::LUMEN_ERROR_CORRUPT_SNAPSHOT),
        (Status::SnapshotVersion, sys::LUMEN_ERROR_SNAPSHOT_VERSION),
        (Status::Io, sys::LUMEN_ERROR_IO),
    ];
    for (status, code) in pairs {
        assert_eq!(status.code(), code);
        assert_eq!(Status::from_code(code), Some(status));
    }
    let error = failed_call();
    assert_eq!(error.code(), sys::LUMEN_ERROR_INVALID_ARGUMENT);
    assert_eq!(error.status().code(), error.code());
}

#[test]
fn an_error_is_a_std_error_showing_status_and_message() {
    let error = failed_call();
    assert_eq!(error.status(), Status::InvalidArgument);
    assert!(!error.message().is_empty());
    assert_eq!(error.to_string(), format!("LUMEN_ERROR_INVALID_ARGUMENT: {}", error.message()));
    // `?` into Box<dyn Error> keeps it, and it comes back by downcast.
    let boxed: Box<dyn std::error::Error + Send + Sync> = error.clone().into();
    assert_eq!(boxed.to_string(), error.to_string());
    assert_eq!(boxed.downcast_ref::<Error>(), Some(&error));
    assert!(format!("{:?}", error).contains("InvalidArgument"));
}

#[test]
fn matching_on_the_status_reads_as_rust() {
    let error = failed_call();
    let what = match error.status() {
        Status::InvalidArgument | Status::OutOfRange => "the caller's mistake",
        _ => "something else",
    };
    assert_eq!(what, "the caller's mistake");
}
