// SPDX-License-Identifier: GPL-2.0

//! Folio helpers.

use kernel::bindings;

use crate::shim;

/// The bytes of a (locked) folio.
///
/// # Safety
///
/// `folio` must be locked by the caller, not in highmem, and stay locked while the slice lives.
pub(crate) unsafe fn folio_bytes<'a>(folio: *mut bindings::folio) -> &'a mut [u8] {
    // SAFETY: per the contract: ferrofs mappings are never highmem, so the address is valid
    // for `folio_size` bytes.
    unsafe { core::slice::from_raw_parts_mut(shim::ferrofs_folio_address(folio) as *mut u8, shim::ferrofs_folio_size(folio)) }
}
