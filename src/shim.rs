// SPDX-License-Identifier: GPL-2.0

//! Declarations of the C shim in `shim.c` (one-line wrappers for static inlines, macros and MTD).

use kernel::ffi::{c_char, c_int, c_long, c_uchar, c_uint, c_void};
use kernel::bindings::{
    address_space, delayed_call, dentry, dir_context, file, folio, fs_context, fs_parameter, inode,
    kmem_cache, kstatfs, mtd_info, block_device, bio, page, readahead_control, seq_file, super_block, xattr, xattr_handler,
    posix_acl, mnt_idmap, fileattr, umode_t,
};

/// `fill_super` callback type taken by `get_tree_mtd` and `get_tree_bdev`.
pub(crate) type FillSuper = unsafe extern "C" fn(*mut super_block, *mut fs_context) -> c_int;

// The bindings' structs with no fields (as `mod_arch_specific` inside `struct inode`'s
// transitive members) trip this lint; the kernel's own `bindings` crate allows it for the same
// reason. Only pointers to these structs cross the boundary.
#[expect(improper_ctypes, reason = "the bindings' field-less structs; only pointers cross")]
extern "C" {
    pub(crate) fn ferrofs_i_size_read(inode: *const inode) -> i64;
    pub(crate) fn ferrofs_i_size_write(inode: *mut inode, size: i64);
    pub(crate) fn ferrofs_dir_emit(ctx: *mut dir_context, name: *const c_char, len: c_int, ino: u64, ty: c_uint) -> bool;
    pub(crate) fn ferrofs_get_tree_mtd(fc: *mut fs_context, fill: FillSuper) -> c_int;
    pub(crate) fn ferrofs_kill_mtd_super(sb: *mut super_block);
    pub(crate) fn ferrofs_sb_mtd(sb: *mut super_block) -> *mut mtd_info;
    pub(crate) fn ferrofs_mtd_size(mtd: *const mtd_info) -> u64;
    pub(crate) fn ferrofs_mtd_erasesize(mtd: *const mtd_info) -> u32;
    pub(crate) fn ferrofs_mtd_writesize(mtd: *const mtd_info) -> u32;
    pub(crate) fn ferrofs_mtd_type(mtd: *const mtd_info) -> u8;
    pub(crate) fn ferrofs_mtd_index(mtd: *const mtd_info) -> c_int;
    pub(crate) fn ferrofs_mtd_can_have_bb(mtd: *const mtd_info) -> bool;
    pub(crate) fn ferrofs_mtd_writeable(mtd: *const mtd_info) -> bool;
    pub(crate) fn ferrofs_mtd_pairing_groups(mtd: *mut mtd_info) -> c_int;
    pub(crate) fn ferrofs_mtd_wunit_to_pairing_info(mtd: *mut mtd_info, wunit: c_int, pair: *mut c_int, group: *mut c_int) -> c_int;
    pub(crate) fn ferrofs_mtd_read(mtd: *mut mtd_info, from: i64, len: usize, retlen: *mut usize, buf: *mut c_uchar) -> c_int;
    pub(crate) fn ferrofs_mtd_write(mtd: *mut mtd_info, to: i64, len: usize, retlen: *mut usize, buf: *const c_uchar) -> c_int;
    pub(crate) fn ferrofs_mtd_erase(mtd: *mut mtd_info, addr: i64, len: u64) -> c_int;
    pub(crate) fn ferrofs_mtd_block_isbad(mtd: *mut mtd_info, ofs: i64) -> c_int;
    pub(crate) fn ferrofs_mtd_block_markbad(mtd: *mut mtd_info, ofs: i64) -> c_int;
    pub(crate) fn ferrofs_mtd_sync(mtd: *mut mtd_info);
    pub(crate) fn ferrofs_get_tree_bdev(fc: *mut fs_context, fill: FillSuper) -> c_int;
    pub(crate) fn ferrofs_kill_block_super(sb: *mut super_block);
    pub(crate) fn ferrofs_sb_bdev(sb: *mut super_block) -> *mut block_device;
    pub(crate) fn ferrofs_sb_id(sb: *const super_block) -> *const c_char;
    pub(crate) fn ferrofs_fc_source(fc: *const fs_context) -> *const c_char;
    pub(crate) fn ferrofs_bdev_nr_bytes(bdev: *mut block_device) -> u64;
    pub(crate) fn ferrofs_bdev_logical_block_size(bdev: *mut block_device) -> u32;
    pub(crate) fn ferrofs_bdev_physical_block_size(bdev: *mut block_device) -> u32;
    pub(crate) fn ferrofs_bdev_read_only(bdev: *mut block_device) -> bool;
    pub(crate) fn ferrofs_bdev_max_discard_sectors(bdev: *mut block_device) -> u32;
    pub(crate) fn ferrofs_blkdev_issue_discard(bdev: *mut block_device, sector: u64, nr_sects: u64) -> c_int;
    pub(crate) fn ferrofs_blkdev_issue_flush(bdev: *mut block_device) -> c_int;
    pub(crate) fn ferrofs_bdev_max_sectors(bdev: *mut block_device) -> u32;
    pub(crate) fn ferrofs_bdev_max_segments(bdev: *mut block_device) -> u32;
    pub(crate) fn ferrofs_blk_next_bio(prev: *mut bio, bdev: *mut block_device, nr_vecs: u16, write: bool, sector: u64) -> *mut bio;
    pub(crate) fn ferrofs_bio_add_page(bio: *mut bio, page: *mut page, len: c_uint, off: c_uint) -> bool;
    pub(crate) fn ferrofs_submit_bio_wait(bio: *mut bio) -> c_int;
    pub(crate) fn ferrofs_bio_put(bio: *mut bio);
    pub(crate) fn ferrofs_bio_max_vecs() -> c_uint;
    pub(crate) fn ferrofs_alloc_page() -> *mut page;
    pub(crate) fn ferrofs_free_page(page: *mut page);
    pub(crate) fn ferrofs_page_address(page: *mut page) -> *mut c_void;
    pub(crate) fn ferrofs_fc_set_ops(fc: *mut fs_context);
    pub(crate) fn ferrofs_fc_fs_private(fc: *mut fs_context) -> *mut c_void;
    pub(crate) fn ferrofs_fc_set_fs_private(fc: *mut fs_context, p: *mut c_void);
    pub(crate) fn ferrofs_fc_sb_flags(fc: *const fs_context) -> c_uint;
    pub(crate) fn ferrofs_fc_root(fc: *const fs_context) -> *mut dentry;
    pub(crate) fn ferrofs_param_key(p: *const fs_parameter) -> *const c_char;
    pub(crate) fn ferrofs_param_is_string(p: *const fs_parameter) -> bool;
    pub(crate) fn ferrofs_param_string(p: *const fs_parameter) -> *const c_char;
    pub(crate) fn ferrofs_fc_error(fc: *mut fs_context, msg: *const c_char) -> c_int;
    pub(crate) fn ferrofs_sb_set_xattr(sb: *mut super_block);
    pub(crate) fn ferrofs_xattr_handler_prefix(h: *const xattr_handler) -> *const c_char;
    pub(crate) fn ferrofs_dentry_name(d: *const dentry, len: *mut u32) -> *const c_uchar;
    pub(crate) fn ferrofs_d_inode(d: *const dentry) -> *mut inode;
    pub(crate) fn ferrofs_file_inode(f: *const file) -> *mut inode;
    pub(crate) fn ferrofs_current_fsuid() -> u32;
    pub(crate) fn ferrofs_current_fsgid() -> u32;
    pub(crate) fn ferrofs_totalram_bytes() -> u64;
    pub(crate) fn ferrofs_i_uid_read(i: *const inode) -> u32;
    pub(crate) fn ferrofs_i_gid_read(i: *const inode) -> u32;
    pub(crate) fn ferrofs_i_uid_write(i: *mut inode, uid: u32);
    pub(crate) fn ferrofs_i_gid_write(i: *mut inode, gid: u32);
    pub(crate) fn ferrofs_new_encode_dev(dev: u32) -> u32;
    pub(crate) fn ferrofs_new_decode_dev(dev: u32) -> u32;
    pub(crate) fn ferrofs_set_delayed_call_kfree(call: *mut delayed_call, buf: *mut c_void);
    pub(crate) fn ferrofs_memalloc_nofs_save() -> c_uint;
    pub(crate) fn ferrofs_memalloc_nofs_restore(flags: c_uint);
    pub(crate) fn ferrofs_seq_puts(m: *mut seq_file, s: *const c_char);
    pub(crate) fn ferrofs_write_begin_folio(mapping: *mut address_space, pos: i64) -> *mut folio;
    pub(crate) fn ferrofs_folio_pos(f: *mut folio) -> i64;
    pub(crate) fn ferrofs_folio_size(f: *mut folio) -> usize;
    pub(crate) fn ferrofs_folio_address(f: *mut folio) -> *mut c_void;
    pub(crate) fn ferrofs_folio_inode(f: *mut folio) -> *mut inode;
    pub(crate) fn ferrofs_folio_test_uptodate(f: *mut folio) -> bool;
    pub(crate) fn ferrofs_folio_mark_uptodate(f: *mut folio);
    pub(crate) fn ferrofs_folio_unlock(f: *mut folio);
    pub(crate) fn ferrofs_folio_put(f: *mut folio);
    pub(crate) fn ferrofs_folio_start_writeback(f: *mut folio);
    pub(crate) fn ferrofs_folio_end_writeback(f: *mut folio);
    pub(crate) fn ferrofs_mapping_set_gfp_nofs(m: *mut address_space);
    pub(crate) fn ferrofs_debugfs_dir(name: *const c_char, parent: *mut dentry) -> *mut dentry;
    pub(crate) fn ferrofs_debugfs_u64(name: *const c_char, parent: *mut dentry, value: *mut u64);
    pub(crate) fn ferrofs_debugfs_remove(d: *mut dentry);
    pub(crate) fn ferrofs_inode_cache_create(size: c_uint, ctor: unsafe extern "C" fn(*mut c_void)) -> *mut kmem_cache;
    pub(crate) fn ferrofs_alloc_inode_sb(sb: *mut super_block, cache: *mut kmem_cache) -> *mut c_void;
    pub(crate) fn ferrofs_readahead_folio(rac: *mut readahead_control) -> *mut folio;
    pub(crate) fn ferrofs_folio_test_private(f: *mut folio) -> bool;
    pub(crate) fn ferrofs_folio_attach_budget(f: *mut folio);
    pub(crate) fn ferrofs_folio_detach_private(f: *mut folio);
    pub(crate) fn ferrofs_folio_test_dirty(f: *mut folio) -> bool;
    pub(crate) fn ferrofs_folio_zero_range(f: *mut folio, off: usize, len: usize);
    pub(crate) fn ferrofs_folio_lock(f: *mut folio);
    pub(crate) fn ferrofs_folio_get(f: *mut folio);
    pub(crate) fn ferrofs_folio_wait_stable(f: *mut folio);
    pub(crate) fn ferrofs_folio_mapping(f: *mut folio) -> *mut address_space;
    pub(crate) fn ferrofs_filemap_lock_folio(m: *mut address_space, pos: i64) -> *mut folio;
    pub(crate) fn ferrofs_filemap_invalidate_lock(m: *mut address_space);
    pub(crate) fn ferrofs_filemap_invalidate_unlock(m: *mut address_space);
    pub(crate) fn ferrofs_filemap_invalidate_lock_shared(m: *mut address_space);
    pub(crate) fn ferrofs_filemap_invalidate_unlock_shared(m: *mut address_space);
    pub(crate) fn ferrofs_mapping_has_dirty(m: *mut address_space) -> bool;
    pub(crate) fn ferrofs_sb_start_pagefault(sb: *mut super_block);
    pub(crate) fn ferrofs_sb_end_pagefault(sb: *mut super_block);
    pub(crate) fn ferrofs_vmf_folio(vmf: *mut kernel::bindings::vm_fault) -> *mut folio;
    pub(crate) fn ferrofs_vmf_file(vmf: *mut kernel::bindings::vm_fault) -> *mut file;
    pub(crate) fn ferrofs_vma_set_ops(vma: *mut kernel::bindings::vm_area_struct, ops: *const kernel::bindings::vm_operations_struct);
    pub(crate) fn ferrofs_mark_inode_dirty(i: *mut inode);
    pub(crate) fn ferrofs_migrate_folio(m: *mut address_space, dst: *mut folio, src: *mut folio, mode: kernel::bindings::migrate_mode) -> c_int;
    pub(crate) fn ferrofs_readahead_inode(rac: *mut readahead_control) -> *mut inode;
    pub(crate) fn ferrofs_kstatfs_fill(b: *mut kstatfs, ty: c_long, bsize: u32, frsize: u32, blocks: u64, bfree: u64, bavail: u64, files: u64, ffree: u64, namelen: u32, fsid: u64);
    pub(crate) fn ferrofs_mapping_set_error(m: *mut address_space, err: c_int);
    pub(crate) fn ferrofs_filemap_write_and_wait(m: *mut address_space) -> c_int;
    pub(crate) fn ferrofs_filemap_write_and_wait_range(m: *mut address_space, start: i64, end: i64) -> c_int;
    pub(crate) fn ferrofs_sb_rdonly(sb: *const super_block) -> bool;
    pub(crate) fn ferrofs_sb_set_rdonly(sb: *mut super_block);
    pub(crate) fn ferrofs_sb_start_intwrite(sb: *mut super_block);
    pub(crate) fn ferrofs_sb_end_intwrite(sb: *mut super_block);
    pub(crate) fn ferrofs_set_freezable();
    pub(crate) fn ferrofs_set_current_state(state: c_uint);
    pub(crate) fn ferrofs_init_security(inode: *mut inode, dir: *mut inode, dentry: *const dentry, fs_data: *mut c_void) -> c_int;
    // exported by fs/ioctl.c; `linux/fiemap.h` is not in the bindings, so declared here
    pub(crate) fn fiemap_prep(inode: *mut inode, fieinfo: *mut kernel::bindings::fiemap_extent_info, start: u64, len: *mut u64, supported_flags: u32) -> c_int;
    pub(crate) fn fiemap_fill_next_extent(fieinfo: *mut kernel::bindings::fiemap_extent_info, logical: u64, phys: u64, len: u64, flags: u32) -> c_int;
    pub(crate) fn ferrofs_xattr_entry(xs: *const xattr, i: usize, value: *mut *mut c_void, len: *mut usize) -> *const c_char;
    pub(crate) fn ferrofs_posix_acl_from_xattr(value: *const c_void, size: usize) -> *mut posix_acl;
    pub(crate) fn ferrofs_posix_acl_to_xattr(acl: *const posix_acl, buf: *mut c_void, size: usize) -> c_int;
    pub(crate) fn ferrofs_posix_acl_dup(acl: *mut posix_acl);
    pub(crate) fn ferrofs_posix_acl_release(acl: *mut posix_acl);
    pub(crate) fn ferrofs_posix_acl_create(dir: *mut inode, mode: *mut umode_t, default_acl: *mut *mut posix_acl, acl: *mut *mut posix_acl) -> c_int;
    pub(crate) fn ferrofs_posix_acl_update_mode(idmap: *mut mnt_idmap, inode: *mut inode, mode: *mut umode_t, acl: *mut *mut posix_acl) -> c_int;
    pub(crate) fn ferrofs_posix_acl_chmod(acl: *mut *mut posix_acl, mode: umode_t) -> c_int;
    pub(crate) fn ferrofs_get_inode_acl(inode: *mut inode, ty: c_int) -> *mut posix_acl;
    pub(crate) fn ferrofs_set_cached_acl(inode: *mut inode, ty: c_int, acl: *mut posix_acl);
    pub(crate) fn ferrofs_fileattr_flags(fa: *const fileattr) -> u32;
    pub(crate) fn ferrofs_fileattr_has_fsx(fa: *const fileattr) -> bool;
    pub(crate) fn ferrofs_fileattr_fill_flags(fa: *mut fileattr, flags: u32);
}
