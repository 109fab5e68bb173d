// SPDX-License-Identifier: GPL-2.0

//! The static operation tables (super, inode, file, address space and vm operations).

use kernel::bindings;

use crate::acl::{get_inode_acl, set_acl};
use crate::data::{direct_io, file_mmap, invalidate_folio, page_mkwrite, read_folio, readahead, release_folio, write_begin, write_end, writepages};
use crate::dir::{dir_llseek, iterate_shared};
use crate::extents::{fallocate, fiemap};
use crate::file::{file_llseek, fsync};
use crate::fileattr::{fileattr_get, fileattr_set};
use crate::inode::{evict_inode, get_link, setattr, write_inode};
use crate::kfs::{alloc_inode, free_inode, migrate_folio, no_callbacks, Table};
use crate::namei::{create, link, lookup, mkdir, mknod, rename, rmdir, symlink, tmpfile, unlink};
use crate::super_::{freeze_fs, put_super, show_options, statfs, sync_fs, unfreeze_fs};
use crate::xattr::listxattr;

pub(crate) struct Ops {
    pub(crate) sops: Table<bindings::super_operations>,
    pub(crate) dir_iops: Table<bindings::inode_operations>,
    pub(crate) file_iops: Table<bindings::inode_operations>,
    pub(crate) symlink_iops: Table<bindings::inode_operations>,
    pub(crate) special_iops: Table<bindings::inode_operations>,
    pub(crate) dir_fops: Table<bindings::file_operations>,
    pub(crate) file_fops: Table<bindings::file_operations>,
    pub(crate) aops: Table<bindings::address_space_operations>,
    pub(crate) vm_ops: Table<bindings::vm_operations_struct>,
}

pub(crate) static OPS: Ops = Ops {
    sops: Table(bindings::super_operations {
        alloc_inode: Some(alloc_inode),
        free_inode: Some(free_inode),
        put_super: Some(put_super),
        statfs: Some(statfs),
        sync_fs: Some(sync_fs),
        write_inode: Some(write_inode),
        evict_inode: Some(evict_inode),
        show_options: Some(show_options),
        freeze_fs: Some(freeze_fs),
        unfreeze_fs: Some(unfreeze_fs),
        ..no_callbacks()
    }),
    dir_iops: Table(bindings::inode_operations {
        lookup: Some(lookup),
        create: Some(create),
        mkdir: Some(mkdir),
        rmdir: Some(rmdir),
        unlink: Some(unlink),
        link: Some(link),
        symlink: Some(symlink),
        mknod: Some(mknod),
        rename: Some(rename),
        tmpfile: Some(tmpfile),
        setattr: Some(setattr),
        listxattr: Some(listxattr),
        get_inode_acl: Some(get_inode_acl),
        set_acl: Some(set_acl),
        fileattr_get: Some(fileattr_get),
        fileattr_set: Some(fileattr_set),
        ..no_callbacks()
    }),
    file_iops: Table(bindings::inode_operations {
        setattr: Some(setattr),
        listxattr: Some(listxattr),
        get_inode_acl: Some(get_inode_acl),
        set_acl: Some(set_acl),
        fileattr_get: Some(fileattr_get),
        fileattr_set: Some(fileattr_set),
        fiemap: Some(fiemap),
        ..no_callbacks()
    }),
    symlink_iops: Table(bindings::inode_operations {
        get_link: Some(get_link),
        setattr: Some(setattr),
        listxattr: Some(listxattr),
        ..no_callbacks()
    }),
    special_iops: Table(bindings::inode_operations {
        setattr: Some(setattr),
        listxattr: Some(listxattr),
        get_inode_acl: Some(get_inode_acl),
        set_acl: Some(set_acl),
        ..no_callbacks()
    }),
    dir_fops: Table(bindings::file_operations {
        llseek: Some(dir_llseek),
        read: Some(bindings::generic_read_dir),
        iterate_shared: Some(iterate_shared),
        fsync: Some(fsync),
        ..no_callbacks()
    }),
    file_fops: Table(bindings::file_operations {
        llseek: Some(file_llseek),
        read_iter: Some(bindings::generic_file_read_iter),
        write_iter: Some(bindings::generic_file_write_iter),
        mmap: Some(file_mmap),
        open: Some(bindings::generic_file_open),
        fsync: Some(fsync),
        fallocate: Some(fallocate),
        splice_read: Some(bindings::filemap_splice_read),
        splice_write: Some(bindings::iter_file_splice_write),
        ..no_callbacks()
    }),
    aops: Table(bindings::address_space_operations {
        read_folio: Some(read_folio),
        readahead: Some(readahead),
        writepages: Some(writepages),
        dirty_folio: Some(bindings::filemap_dirty_folio),
        write_begin: Some(write_begin),
        write_end: Some(write_end),
        invalidate_folio: Some(invalidate_folio),
        release_folio: Some(release_folio),
        migrate_folio: Some(migrate_folio),
        direct_IO: Some(direct_io),
        ..no_callbacks()
    }),
    // shared mappings of regular files: the generic fault paths, our page_mkwrite (budget)
    vm_ops: Table(bindings::vm_operations_struct {
        fault: Some(bindings::filemap_fault),
        map_pages: Some(bindings::filemap_map_pages),
        page_mkwrite: Some(page_mkwrite),
        ..no_callbacks()
    }),
};
