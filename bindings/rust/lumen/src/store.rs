use std::ffi::CString;
use std::ptr::{self, NonNull};

use crate::error::{check, Error, Result};
use crate::options::{StoreOptions, StoreSaveOptions};
use crate::session::Session;
use crate::sys;

/// A session store (`lumen_store`): sessions' snapshots under string keys, in a directory
/// (`file:///path`) or a Redis server (`redis://host:port/db`), each with a version and an
/// optional expiry; see "Session stores" in lumen.h. Thread-safe: its calls take turns.
pub struct Store {
    raw: NonNull<sys::lumen_store>,
}

// SAFETY: the header makes a store callable from several threads (its calls take turns).
unsafe impl Send for Store {}
unsafe impl Sync for Store {}

impl Store {
    /// Opens the store `uri` (`lumen_store_open`); `None` takes the default options.
    pub fn open(uri: &str, options: Option<&StoreOptions>) -> Result<Store> {
        let uri = c_text("uri", uri)?;
        let options = options.map_or(ptr::null(), StoreOptions::as_ptr);
        let mut raw = ptr::null_mut();
        // SAFETY: uri is NUL-terminated; options NULL or valid; raw a valid out-pointer.
        check(unsafe { sys::lumen_store_open(uri.as_ptr(), options, &mut raw) })?;
        Ok(Store { raw: NonNull::new(raw).expect("lumen returned a NULL store") })
    }

    /// Saves the session under `key` and returns the version it now has
    /// (`lumen_store_save`); `Status::VersionConflict` when `expected_version` is set and
    /// another writer saved first.
    pub fn save(&self, key: &str, session: &Session, options: Option<&StoreSaveOptions>)
                -> Result<i64> {
        let key = c_text("key", key)?;
        let options = options.map_or(ptr::null(), StoreSaveOptions::as_ptr);
        let mut version = 0;
        // SAFETY: the store and session are live; key is NUL-terminated; options NULL or
        // valid; version a valid out-pointer.
        check(unsafe {
            sys::lumen_store_save(self.raw.as_ptr(), key.as_ptr(), session.as_raw(), options,
                                  &mut version)
        })?;
        Ok(version)
    }

    /// Restores the session from the value under `key` and returns its version
    /// (`lumen_store_load`); `Status::NotFound` when the key holds nothing.
    pub fn load(&self, key: &str, session: &mut Session) -> Result<i64> {
        let key = c_text("key", key)?;
        let mut version = 0;
        // SAFETY: as in save; the session is borrowed mutably for the call.
        check(unsafe {
            sys::lumen_store_load(self.raw.as_ptr(), key.as_ptr(), session.as_mut_ptr(),
                                  &mut version)
        })?;
        Ok(version)
    }

    /// Removes the value under `key` (`lumen_store_remove`).
    pub fn remove(&self, key: &str) -> Result<()> {
        let key = c_text("key", key)?;
        // SAFETY: the store is live; key is NUL-terminated.
        check(unsafe { sys::lumen_store_remove(self.raw.as_ptr(), key.as_ptr()) })
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // SAFETY: the store is live and dropped once.
        unsafe { sys::lumen_store_destroy(self.raw.as_ptr()) }
    }
}

fn c_text(what: &str, text: &str) -> Result<CString> {
    CString::new(text).map_err(|_| Error::invalid_argument(format!("{} contains a NUL byte", what)))
}
