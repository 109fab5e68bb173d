// SPDX-License-Identifier: GPL-2.0
/*
 * ferrofs C shim: one-line wrappers for what Rust cannot call directly (static inline
 * functions, macros, and MTD, whose headers the 6.12 Rust bindings do not include), and two
 * constant tables of function pointers whose struct types are opaque to Rust
 * (fs_context_operations, xattr_handler). No logic lives here: every function is a single
 * call or field access, and every callback named in a table is implemented in Rust.
 */
#include <linux/fs.h>
#include <linux/fs_context.h>
#include <linux/fs_parser.h>
#include <linux/mtd/mtd.h>
#include <linux/mtd/super.h>
#include <linux/blkdev.h>
#include <linux/bio.h>
#include <linux/pagemap.h>
#include <linux/highmem.h>
#include <linux/sched/mm.h>
#include <linux/cred.h>
#include <linux/xattr.h>
#include <linux/seq_file.h>
#include <linux/kdev_t.h>
#include <linux/statfs.h>
#include <linux/debugfs.h>
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/migrate_mode.h>
#include "shim.h"

/* Inode size, which the kernel guards with a seqcount on 32-bit SMP. */
loff_t ferrofs_i_size_read(const struct inode *inode) { return i_size_read(inode); }
void ferrofs_i_size_write(struct inode *inode, loff_t size) { i_size_write(inode, size); }

/* readdir: emit one entry into the caller's buffer; false when it is full. */
bool ferrofs_dir_emit(struct dir_context *ctx, const char *name, int len, u64 ino, unsigned int type)
{ return dir_emit(ctx, name, len, ino, type); }

/* Mounting on MTD: parses "mtd:NAME" and "mtdN" and calls fill_super with sb->s_mtd set. */
int ferrofs_get_tree_mtd(struct fs_context *fc, int (*fill_super)(struct super_block *, struct fs_context *))
{ return get_tree_mtd(fc, fill_super); }
void ferrofs_kill_mtd_super(struct super_block *sb) { kill_mtd_super(sb); }
struct mtd_info *ferrofs_sb_mtd(struct super_block *sb) { return sb->s_mtd; }

/* MTD geometry: struct mtd_info is opaque to Rust. */
u64 ferrofs_mtd_size(const struct mtd_info *mtd) { return mtd->size; }
u32 ferrofs_mtd_erasesize(const struct mtd_info *mtd) { return mtd->erasesize; }
u32 ferrofs_mtd_writesize(const struct mtd_info *mtd) { return mtd->writesize; }
u8 ferrofs_mtd_type(const struct mtd_info *mtd) { return mtd->type; }
int ferrofs_mtd_index(const struct mtd_info *mtd) { return mtd->index; }
bool ferrofs_mtd_can_have_bb(const struct mtd_info *mtd) { return mtd_can_have_bb(mtd); }
bool ferrofs_mtd_writeable(const struct mtd_info *mtd) { return mtd->flags & MTD_WRITEABLE; }
int ferrofs_mtd_pairing_groups(struct mtd_info *mtd) { return mtd_pairing_groups(mtd); }
int ferrofs_mtd_wunit_to_pairing_info(struct mtd_info *mtd, int wunit, int *pair, int *group)
{ struct mtd_pairing_info i = { 0 }; int r = mtd_wunit_to_pairing_info(mtd, wunit, &i); *pair = i.pair; *group = i.group; return r; }

/* MTD I/O: exported functions, wrapped so that Rust needs no mtd.h bindings. */
int ferrofs_mtd_read(struct mtd_info *mtd, loff_t from, size_t len, size_t *retlen, u_char *buf)
{ return mtd_read(mtd, from, len, retlen, buf); }
int ferrofs_mtd_write(struct mtd_info *mtd, loff_t to, size_t len, size_t *retlen, const u_char *buf)
{ return mtd_write(mtd, to, len, retlen, buf); }
int ferrofs_mtd_erase(struct mtd_info *mtd, loff_t addr, u64 len)
{ struct erase_info ei = { .addr = addr, .len = len }; return mtd_erase(mtd, &ei); }
int ferrofs_mtd_block_isbad(struct mtd_info *mtd, loff_t ofs) { return mtd_block_isbad(mtd, ofs); }
int ferrofs_mtd_block_markbad(struct mtd_info *mtd, loff_t ofs) { return mtd_block_markbad(mtd, ofs); }
void ferrofs_mtd_sync(struct mtd_info *mtd) { mtd_sync(mtd); }

/* Mounting on a block device (the block backend, src/blk.rs): get_tree_bdev opens the device
 * named by the source exclusively and calls fill_super with sb->s_bdev set. */
int ferrofs_get_tree_bdev(struct fs_context *fc, int (*fill_super)(struct super_block *, struct fs_context *))
{ return get_tree_bdev(fc, fill_super); }
void ferrofs_kill_block_super(struct super_block *sb) { kill_block_super(sb); }
struct block_device *ferrofs_sb_bdev(struct super_block *sb) { return sb->s_bdev; }
const char *ferrofs_sb_id(const struct super_block *sb) { return sb->s_id; }
const char *ferrofs_fc_source(const struct fs_context *fc) { return fc->source; }

/* Block device geometry and I/O (blkdev.h/bio.h inlines; struct bio's iterator). */
u64 ferrofs_bdev_nr_bytes(struct block_device *bdev) { return bdev_nr_bytes(bdev); }
u32 ferrofs_bdev_logical_block_size(struct block_device *bdev) { return bdev_logical_block_size(bdev); }
u32 ferrofs_bdev_physical_block_size(struct block_device *bdev) { return bdev_physical_block_size(bdev); }
bool ferrofs_bdev_read_only(struct block_device *bdev) { return bdev_read_only(bdev); }
u32 ferrofs_bdev_max_discard_sectors(struct block_device *bdev) { return bdev_max_discard_sectors(bdev); }
int ferrofs_blkdev_issue_discard(struct block_device *bdev, u64 sector, u64 nr_sects) { return blkdev_issue_discard(bdev, sector, nr_sects, GFP_NOFS); }
int ferrofs_blkdev_issue_flush(struct block_device *bdev) { return blkdev_issue_flush(bdev); }
u32 ferrofs_bdev_max_sectors(struct block_device *bdev) { return queue_max_sectors(bdev_get_queue(bdev)); }
u32 ferrofs_bdev_max_segments(struct block_device *bdev) { return bdev_max_segments(bdev); }
/* A new bio at `sector`; `prev` (if not NULL) is chained to it and submitted (blk_next_bio). */
struct bio *ferrofs_blk_next_bio(struct bio *prev, struct block_device *bdev, unsigned short nr_vecs, bool write, u64 sector)
{ struct bio *bio = blk_next_bio(prev, bdev, nr_vecs, write ? REQ_OP_WRITE | REQ_SYNC : REQ_OP_READ, GFP_NOFS); bio->bi_iter.bi_sector = sector; return bio; }
bool ferrofs_bio_add_page(struct bio *bio, struct page *page, unsigned int len, unsigned int off) { return bio_add_page(bio, page, len, off) == len; }
int ferrofs_submit_bio_wait(struct bio *bio) { return submit_bio_wait(bio); }
void ferrofs_bio_put(struct bio *bio) { bio_put(bio); }
unsigned int ferrofs_bio_max_vecs(void) { return BIO_MAX_VECS; }
struct page *ferrofs_alloc_page(void) { return alloc_page(GFP_NOFS); }
void ferrofs_free_page(struct page *page) { __free_page(page); }
void *ferrofs_page_address(struct page *page) { return page_address(page); }

/* fs_context: opaque to Rust. The operations table points at Rust callbacks. */
static const struct fs_context_operations ferrofs_context_ops = {
	.parse_param = ferrofs_parse_param, .get_tree = ferrofs_get_tree,
	.reconfigure = ferrofs_reconfigure, .free = ferrofs_fc_free,
};
void ferrofs_fc_set_ops(struct fs_context *fc) { fc->ops = &ferrofs_context_ops; }
void *ferrofs_fc_fs_private(struct fs_context *fc) { return fc->fs_private; }
void ferrofs_fc_set_fs_private(struct fs_context *fc, void *p) { fc->fs_private = p; }
unsigned int ferrofs_fc_sb_flags(const struct fs_context *fc) { return fc->sb_flags; }
struct dentry *ferrofs_fc_root(const struct fs_context *fc) { return fc->root; }
const char *ferrofs_param_key(const struct fs_parameter *p) { return p->key; }
bool ferrofs_param_is_string(const struct fs_parameter *p) { return p->type == fs_value_is_string; }
const char *ferrofs_param_string(const struct fs_parameter *p) { return p->string; }
int ferrofs_fc_error(struct fs_context *fc, const char *msg) { return invalfc(fc, "%s", msg); }

/* xattr: the handler table (one per namespace) points at Rust callbacks. */
static const struct xattr_handler ferrofs_xattr_user = {
	.prefix = XATTR_USER_PREFIX, .get = ferrofs_xattr_get, .set = ferrofs_xattr_set };
static const struct xattr_handler ferrofs_xattr_trusted = {
	.prefix = XATTR_TRUSTED_PREFIX, .get = ferrofs_xattr_get, .set = ferrofs_xattr_set };
static const struct xattr_handler ferrofs_xattr_security = {
	.prefix = XATTR_SECURITY_PREFIX, .get = ferrofs_xattr_get, .set = ferrofs_xattr_set };
static const struct xattr_handler * const ferrofs_xattr_handlers[] = {
	&ferrofs_xattr_user, &ferrofs_xattr_trusted, &ferrofs_xattr_security, NULL };
void ferrofs_sb_set_xattr(struct super_block *sb) { sb->s_xattr = ferrofs_xattr_handlers; }
const char *ferrofs_xattr_handler_prefix(const struct xattr_handler *h) { return h->prefix; }

/* Dentries, files, credentials. */
const unsigned char *ferrofs_dentry_name(const struct dentry *d, u32 *len) { *len = d->d_name.len; return d->d_name.name; }
struct inode *ferrofs_d_inode(const struct dentry *d) { return d_inode(d); }
struct inode *ferrofs_file_inode(const struct file *f) { return file_inode(f); }
u32 ferrofs_current_fsuid(void) { return from_kuid(&init_user_ns, current_fsuid()); }
u32 ferrofs_current_fsgid(void) { return from_kgid(&init_user_ns, current_fsgid()); }

/* RAM in bytes (the read cache's automatic size is a fraction of it). */
u64 ferrofs_totalram_bytes(void) { return (u64)totalram_pages() << PAGE_SHIFT; }
u32 ferrofs_i_uid_read(const struct inode *i) { return i_uid_read(i); }
u32 ferrofs_i_gid_read(const struct inode *i) { return i_gid_read(i); }
void ferrofs_i_uid_write(struct inode *i, u32 uid) { i_uid_write(i, uid); }
void ferrofs_i_gid_write(struct inode *i, u32 gid) { i_gid_write(i, gid); }
u32 ferrofs_new_encode_dev(dev_t dev) { return new_encode_dev(dev); }
dev_t ferrofs_new_decode_dev(u32 dev) { return new_decode_dev(dev); }
void ferrofs_set_delayed_call_kfree(struct delayed_call *call, void *buf) { set_delayed_call(call, kfree_link, buf); }
unsigned int ferrofs_memalloc_nofs_save(void) { return memalloc_nofs_save(); }
void ferrofs_memalloc_nofs_restore(unsigned int flags) { memalloc_nofs_restore(flags); }
void ferrofs_seq_puts(struct seq_file *m, const char *s) { seq_puts(m, s); }

/* statfs: struct kstatfs is opaque to Rust; every value comes from Rust. */
void ferrofs_kstatfs_fill(struct kstatfs *b, long type, u32 bsize, u32 frsize, u64 blocks, u64 bfree, u64 bavail, u64 files, u64 ffree, u32 namelen, u64 fsid)
{ *b = (struct kstatfs){ .f_type = type, .f_bsize = bsize, .f_frsize = frsize, .f_blocks = blocks, .f_bfree = bfree,
	.f_bavail = bavail, .f_files = files, .f_ffree = ffree, .f_namelen = namelen, .f_fsid = u64_to_fsid(fsid) }; }

/* debugfs statistics. */
struct dentry *ferrofs_debugfs_dir(const char *name, struct dentry *parent) { return debugfs_create_dir(name, parent); }
void ferrofs_debugfs_u64(const char *name, struct dentry *parent, u64 *value) { debugfs_create_u64(name, 0444, parent, value); }
void ferrofs_debugfs_remove(struct dentry *d) { debugfs_remove(d); }

/* The inode cache (kmem_cache_create and alloc_inode_sb are macros/inlines; the slab flags are
 * macros whose values depend on the configuration: SLAB_ACCOUNT is 0 without CONFIG_MEMCG). */
struct kmem_cache *ferrofs_inode_cache_create(unsigned int size, void (*ctor)(void *))
{ return kmem_cache_create("ferrofs_inode", size, 0, SLAB_RECLAIM_ACCOUNT | SLAB_ACCOUNT, ctor); }
void *ferrofs_alloc_inode_sb(struct super_block *sb, struct kmem_cache *cache) { return alloc_inode_sb(sb, cache, GFP_KERNEL); }

/* Folios and the page cache (pagemap.h is not in the bindings). */
struct folio *ferrofs_write_begin_folio(struct address_space *mapping, loff_t pos)
{ return __filemap_get_folio(mapping, pos >> PAGE_SHIFT, FGP_WRITEBEGIN, mapping_gfp_mask(mapping)); }
loff_t ferrofs_folio_pos(struct folio *folio) { return folio_pos(folio); }
size_t ferrofs_folio_size(struct folio *folio) { return folio_size(folio); }
void *ferrofs_folio_address(struct folio *folio) { return folio_address(folio); }
struct inode *ferrofs_folio_inode(struct folio *folio) { return folio->mapping->host; }
bool ferrofs_folio_test_uptodate(struct folio *folio) { return folio_test_uptodate(folio); }
void ferrofs_folio_mark_uptodate(struct folio *folio) { folio_mark_uptodate(folio); }
void ferrofs_folio_unlock(struct folio *folio) { folio_unlock(folio); }
void ferrofs_folio_put(struct folio *folio) { folio_put(folio); }
void ferrofs_folio_start_writeback(struct folio *folio) { folio_start_writeback(folio); }
void ferrofs_folio_end_writeback(struct folio *folio) { folio_end_writeback(folio); }
void ferrofs_mapping_set_gfp_nofs(struct address_space *m) { mapping_set_gfp_mask(m, GFP_NOFS); }
struct folio *ferrofs_readahead_folio(struct readahead_control *rac) { return readahead_folio(rac); }
struct inode *ferrofs_readahead_inode(struct readahead_control *rac) { return rac->mapping->host; }
void ferrofs_mapping_set_error(struct address_space *m, int err) { mapping_set_error(m, err); }
int ferrofs_filemap_write_and_wait(struct address_space *m) { return filemap_write_and_wait(m); }
int ferrofs_filemap_write_and_wait_range(struct address_space *m, loff_t start, loff_t end) { return filemap_write_and_wait_range(m, start, end); }

/* Write-back (issue 10): the budget mark on a folio (PG_private, value 1), zeroing, the
 * invalidate lock, page faults. */
bool ferrofs_folio_test_private(struct folio *folio) { return folio_test_private(folio); }
void ferrofs_folio_attach_budget(struct folio *folio) { folio_attach_private(folio, (void *)1); }
void ferrofs_folio_detach_private(struct folio *folio) { folio_detach_private(folio); }
bool ferrofs_folio_test_dirty(struct folio *folio) { return folio_test_dirty(folio); }
void ferrofs_folio_zero_range(struct folio *folio, size_t off, size_t len) { folio_zero_range(folio, off, len); }
void ferrofs_folio_lock(struct folio *folio) { folio_lock(folio); }
void ferrofs_folio_get(struct folio *folio) { folio_get(folio); }
void ferrofs_folio_wait_stable(struct folio *folio) { folio_wait_stable(folio); }
struct address_space *ferrofs_folio_mapping(struct folio *folio) { return folio->mapping; }
struct folio *ferrofs_filemap_lock_folio(struct address_space *m, loff_t pos) { return filemap_lock_folio(m, pos >> PAGE_SHIFT); }
void ferrofs_filemap_invalidate_lock(struct address_space *m) { filemap_invalidate_lock(m); }
void ferrofs_filemap_invalidate_unlock(struct address_space *m) { filemap_invalidate_unlock(m); }
void ferrofs_filemap_invalidate_lock_shared(struct address_space *m) { filemap_invalidate_lock_shared(m); }
void ferrofs_filemap_invalidate_unlock_shared(struct address_space *m) { filemap_invalidate_unlock_shared(m); }
bool ferrofs_mapping_has_dirty(struct address_space *m) { return mapping_tagged(m, PAGECACHE_TAG_DIRTY); }
void ferrofs_sb_start_pagefault(struct super_block *sb) { sb_start_pagefault(sb); }
void ferrofs_sb_end_pagefault(struct super_block *sb) { sb_end_pagefault(sb); }
struct folio *ferrofs_vmf_folio(struct vm_fault *vmf) { return page_folio(vmf->page); }
struct file *ferrofs_vmf_file(struct vm_fault *vmf) { return vmf->vma->vm_file; }
void ferrofs_vma_set_ops(struct vm_area_struct *vma, const struct vm_operations_struct *ops) { vma->vm_ops = ops; }
void ferrofs_mark_inode_dirty(struct inode *inode) { mark_inode_dirty(inode); }
int ferrofs_migrate_folio(struct address_space *m, struct folio *dst, struct folio *src, enum migrate_mode mode)
#ifdef CONFIG_MIGRATION
{ return filemap_migrate_folio(m, dst, src, mode); }
#else
{ return -ENOSYS; /* never called: migration is configured out */ }
#endif

/* Lifecycle (remount, freeze, the background thread, security labels). */
#include <linux/freezer.h>
#include <linux/security.h>
bool ferrofs_sb_rdonly(const struct super_block *sb) { return sb_rdonly(sb); }
void ferrofs_sb_set_rdonly(struct super_block *sb) { sb->s_flags |= SB_RDONLY; }
void ferrofs_sb_start_intwrite(struct super_block *sb) { sb_start_intwrite(sb); }
void ferrofs_sb_end_intwrite(struct super_block *sb) { sb_end_intwrite(sb); }
void ferrofs_set_freezable(void) { set_freezable(); }
void ferrofs_set_current_state(unsigned int state) { set_current_state(state); }
int ferrofs_init_security(struct inode *inode, struct inode *dir, const struct dentry *dentry, void *fs_data)
{ return security_inode_init_security(inode, dir, &dentry->d_name, ferrofs_initxattrs, fs_data); }
const char *ferrofs_xattr_entry(const struct xattr *xs, size_t i, void **value, size_t *len)
{ *value = xs[i].value; *len = xs[i].value_len; return xs[i].name; }

/* POSIX ACLs (src/kfs/acl.rs; posix_acl.h and posix_acl_xattr.h are not in the bindings). The
 * stored form is the xattr form with ids in the initial user namespace, as ext4 and UBIFS keep
 * it; __posix_acl_chmod's copy is made GFP_NOFS. */
#include <linux/posix_acl.h>
#include <linux/posix_acl_xattr.h>
struct posix_acl *ferrofs_posix_acl_from_xattr(const void *value, size_t size) { return posix_acl_from_xattr(&init_user_ns, value, size); }
int ferrofs_posix_acl_to_xattr(const struct posix_acl *acl, void *buf, size_t size) { return posix_acl_to_xattr(&init_user_ns, acl, buf, size); }
void ferrofs_posix_acl_dup(struct posix_acl *acl) { posix_acl_dup(acl); }
void ferrofs_posix_acl_release(struct posix_acl *acl) { posix_acl_release(acl); }
int ferrofs_posix_acl_create(struct inode *dir, umode_t *mode, struct posix_acl **default_acl, struct posix_acl **acl)
{ return posix_acl_create(dir, mode, default_acl, acl); }
int ferrofs_posix_acl_update_mode(struct mnt_idmap *idmap, struct inode *inode, umode_t *mode, struct posix_acl **acl)
{ return posix_acl_update_mode(idmap, inode, mode, acl); }
int ferrofs_posix_acl_chmod(struct posix_acl **acl, umode_t mode) { return __posix_acl_chmod(acl, GFP_NOFS, mode); }
struct posix_acl *ferrofs_get_inode_acl(struct inode *inode, int type) { return get_inode_acl(inode, type); }
void ferrofs_set_cached_acl(struct inode *inode, int type, struct posix_acl *acl) { set_cached_acl(inode, type, acl); }

/* FS_IOC_GETFLAGS/SETFLAGS (src/kfs/fileattr.rs): struct fileattr is opaque to Rust. */
#include <linux/fileattr.h>
u32 ferrofs_fileattr_flags(const struct fileattr *fa) { return fa->flags; }
bool ferrofs_fileattr_has_fsx(const struct fileattr *fa) { return fileattr_has_fsx(fa); }
void ferrofs_fileattr_fill_flags(struct fileattr *fa, u32 flags) { fileattr_fill_flags(fa, flags); }
