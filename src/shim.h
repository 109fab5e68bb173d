/* SPDX-License-Identifier: GPL-2.0 */
/* Prototypes of the ferrofs C shim (src/shim.c) and of the Rust callbacks its tables name.
 * The Rust side declares the same functions in src/shim.rs. */
#ifndef FERROFS_SHIM_H
#define FERROFS_SHIM_H
#include <linux/fs.h>
#include <linux/fs_context.h>
#include <linux/mtd/mtd.h>

/* Implemented in Rust. */
int ferrofs_parse_param(struct fs_context *fc, struct fs_parameter *param);
int ferrofs_get_tree(struct fs_context *fc);
int ferrofs_reconfigure(struct fs_context *fc);
void ferrofs_fc_free(struct fs_context *fc);
int ferrofs_xattr_get(const struct xattr_handler *h, struct dentry *dentry, struct inode *inode,
		      const char *name, void *buffer, size_t size);
int ferrofs_xattr_set(const struct xattr_handler *h, struct mnt_idmap *idmap, struct dentry *dentry,
		      struct inode *inode, const char *name, const void *value, size_t size, int flags);
struct xattr;
int ferrofs_initxattrs(struct inode *inode, const struct xattr *xattrs, void *fs_data);

/* The shim. */
loff_t ferrofs_i_size_read(const struct inode *inode);
void ferrofs_i_size_write(struct inode *inode, loff_t size);
bool ferrofs_dir_emit(struct dir_context *ctx, const char *name, int len, u64 ino, unsigned int type);
int ferrofs_get_tree_mtd(struct fs_context *fc, int (*fill_super)(struct super_block *, struct fs_context *));
void ferrofs_kill_mtd_super(struct super_block *sb);
struct mtd_info *ferrofs_sb_mtd(struct super_block *sb);
u64 ferrofs_mtd_size(const struct mtd_info *mtd);
u32 ferrofs_mtd_erasesize(const struct mtd_info *mtd);
u32 ferrofs_mtd_writesize(const struct mtd_info *mtd);
u8 ferrofs_mtd_type(const struct mtd_info *mtd);
int ferrofs_mtd_index(const struct mtd_info *mtd);
bool ferrofs_mtd_can_have_bb(const struct mtd_info *mtd);
bool ferrofs_mtd_writeable(const struct mtd_info *mtd);
int ferrofs_mtd_pairing_groups(struct mtd_info *mtd);
int ferrofs_mtd_wunit_to_pairing_info(struct mtd_info *mtd, int wunit, int *pair, int *group);
int ferrofs_mtd_read(struct mtd_info *mtd, loff_t from, size_t len, size_t *retlen, u_char *buf);
int ferrofs_mtd_write(struct mtd_info *mtd, loff_t to, size_t len, size_t *retlen, const u_char *buf);
int ferrofs_mtd_erase(struct mtd_info *mtd, loff_t addr, u64 len);
int ferrofs_mtd_block_isbad(struct mtd_info *mtd, loff_t ofs);
int ferrofs_mtd_block_markbad(struct mtd_info *mtd, loff_t ofs);
void ferrofs_mtd_sync(struct mtd_info *mtd);
struct block_device;
struct bio;
struct page;
int ferrofs_get_tree_bdev(struct fs_context *fc, int (*fill_super)(struct super_block *, struct fs_context *));
void ferrofs_kill_block_super(struct super_block *sb);
struct block_device *ferrofs_sb_bdev(struct super_block *sb);
const char *ferrofs_sb_id(const struct super_block *sb);
const char *ferrofs_fc_source(const struct fs_context *fc);
u64 ferrofs_bdev_nr_bytes(struct block_device *bdev);
u32 ferrofs_bdev_logical_block_size(struct block_device *bdev);
u32 ferrofs_bdev_physical_block_size(struct block_device *bdev);
bool ferrofs_bdev_read_only(struct block_device *bdev);
u32 ferrofs_bdev_max_discard_sectors(struct block_device *bdev);
int ferrofs_blkdev_issue_discard(struct block_device *bdev, u64 sector, u64 nr_sects);
int ferrofs_blkdev_issue_flush(struct block_device *bdev);
u32 ferrofs_bdev_max_sectors(struct block_device *bdev);
u32 ferrofs_bdev_max_segments(struct block_device *bdev);
struct bio *ferrofs_blk_next_bio(struct bio *prev, struct block_device *bdev, unsigned short nr_vecs, bool write, u64 sector);
bool ferrofs_bio_add_page(struct bio *bio, struct page *page, unsigned int len, unsigned int off);
int ferrofs_submit_bio_wait(struct bio *bio);
void ferrofs_bio_put(struct bio *bio);
unsigned int ferrofs_bio_max_vecs(void);
struct page *ferrofs_alloc_page(void);
void ferrofs_free_page(struct page *page);
void *ferrofs_page_address(struct page *page);
void ferrofs_fc_set_ops(struct fs_context *fc);
void *ferrofs_fc_fs_private(struct fs_context *fc);
void ferrofs_fc_set_fs_private(struct fs_context *fc, void *p);
unsigned int ferrofs_fc_sb_flags(const struct fs_context *fc);
struct dentry *ferrofs_fc_root(const struct fs_context *fc);
const char *ferrofs_param_key(const struct fs_parameter *p);
bool ferrofs_param_is_string(const struct fs_parameter *p);
const char *ferrofs_param_string(const struct fs_parameter *p);
int ferrofs_fc_error(struct fs_context *fc, const char *msg);
void ferrofs_sb_set_xattr(struct super_block *sb);
const char *ferrofs_xattr_handler_prefix(const struct xattr_handler *h);
const unsigned char *ferrofs_dentry_name(const struct dentry *d, u32 *len);
struct inode *ferrofs_d_inode(const struct dentry *d);
struct inode *ferrofs_file_inode(const struct file *f);
u32 ferrofs_current_fsuid(void);
u32 ferrofs_current_fsgid(void);
u64 ferrofs_totalram_bytes(void);
u32 ferrofs_i_uid_read(const struct inode *i);
u32 ferrofs_i_gid_read(const struct inode *i);
void ferrofs_i_uid_write(struct inode *i, u32 uid);
void ferrofs_i_gid_write(struct inode *i, u32 gid);
u32 ferrofs_new_encode_dev(dev_t dev);
dev_t ferrofs_new_decode_dev(u32 dev);
void ferrofs_set_delayed_call_kfree(struct delayed_call *call, void *buf);
unsigned int ferrofs_memalloc_nofs_save(void);
void ferrofs_memalloc_nofs_restore(unsigned int flags);
void ferrofs_seq_puts(struct seq_file *m, const char *s);
struct folio *ferrofs_write_begin_folio(struct address_space *mapping, loff_t pos);
loff_t ferrofs_folio_pos(struct folio *folio);
size_t ferrofs_folio_size(struct folio *folio);
void *ferrofs_folio_address(struct folio *folio);
struct inode *ferrofs_folio_inode(struct folio *folio);
bool ferrofs_folio_test_uptodate(struct folio *folio);
void ferrofs_folio_mark_uptodate(struct folio *folio);
void ferrofs_folio_unlock(struct folio *folio);
void ferrofs_folio_put(struct folio *folio);
void ferrofs_folio_start_writeback(struct folio *folio);
void ferrofs_folio_end_writeback(struct folio *folio);
void ferrofs_mapping_set_gfp_nofs(struct address_space *m);
struct dentry *ferrofs_debugfs_dir(const char *name, struct dentry *parent);
void ferrofs_debugfs_u64(const char *name, struct dentry *parent, u64 *value);
void ferrofs_debugfs_remove(struct dentry *d);
struct kmem_cache *ferrofs_inode_cache_create(unsigned int size, void (*ctor)(void *));
void *ferrofs_alloc_inode_sb(struct super_block *sb, struct kmem_cache *cache);
struct folio *ferrofs_readahead_folio(struct readahead_control *rac);
struct inode *ferrofs_readahead_inode(struct readahead_control *rac);
void ferrofs_kstatfs_fill(struct kstatfs *b, long type, u32 bsize, u32 frsize, u64 blocks, u64 bfree, u64 bavail, u64 files, u64 ffree, u32 namelen, u64 fsid);
void ferrofs_mapping_set_error(struct address_space *m, int err);
int ferrofs_filemap_write_and_wait(struct address_space *m);
int ferrofs_filemap_write_and_wait_range(struct address_space *m, loff_t start, loff_t end);
bool ferrofs_sb_rdonly(const struct super_block *sb);
void ferrofs_sb_set_rdonly(struct super_block *sb);
void ferrofs_sb_start_intwrite(struct super_block *sb);
void ferrofs_sb_end_intwrite(struct super_block *sb);
void ferrofs_set_freezable(void);
void ferrofs_set_current_state(unsigned int state);
int ferrofs_init_security(struct inode *inode, struct inode *dir, const struct dentry *dentry, void *fs_data);
const char *ferrofs_xattr_entry(const struct xattr *xs, size_t i, void **value, size_t *len);

struct vm_fault;
struct vm_area_struct;
struct vm_operations_struct;
bool ferrofs_folio_test_private(struct folio *folio);
void ferrofs_folio_attach_budget(struct folio *folio);
void ferrofs_folio_detach_private(struct folio *folio);
bool ferrofs_folio_test_dirty(struct folio *folio);
void ferrofs_folio_zero_range(struct folio *folio, size_t off, size_t len);
void ferrofs_folio_lock(struct folio *folio);
void ferrofs_folio_get(struct folio *folio);
void ferrofs_folio_wait_stable(struct folio *folio);
struct address_space *ferrofs_folio_mapping(struct folio *folio);
struct folio *ferrofs_filemap_lock_folio(struct address_space *m, loff_t pos);
void ferrofs_filemap_invalidate_lock(struct address_space *m);
void ferrofs_filemap_invalidate_unlock(struct address_space *m);
void ferrofs_filemap_invalidate_lock_shared(struct address_space *m);
void ferrofs_filemap_invalidate_unlock_shared(struct address_space *m);
bool ferrofs_mapping_has_dirty(struct address_space *m);
void ferrofs_sb_start_pagefault(struct super_block *sb);
void ferrofs_sb_end_pagefault(struct super_block *sb);
struct folio *ferrofs_vmf_folio(struct vm_fault *vmf);
struct file *ferrofs_vmf_file(struct vm_fault *vmf);
void ferrofs_vma_set_ops(struct vm_area_struct *vma, const struct vm_operations_struct *ops);
void ferrofs_mark_inode_dirty(struct inode *inode);
#include <linux/migrate_mode.h>
int ferrofs_migrate_folio(struct address_space *m, struct folio *dst, struct folio *src, enum migrate_mode mode);
struct posix_acl;
struct fileattr;
struct posix_acl *ferrofs_posix_acl_from_xattr(const void *value, size_t size);
int ferrofs_posix_acl_to_xattr(const struct posix_acl *acl, void *buf, size_t size);
void ferrofs_posix_acl_dup(struct posix_acl *acl);
void ferrofs_posix_acl_release(struct posix_acl *acl);
int ferrofs_posix_acl_create(struct inode *dir, umode_t *mode, struct posix_acl **default_acl, struct posix_acl **acl);
int ferrofs_posix_acl_update_mode(struct mnt_idmap *idmap, struct inode *inode, umode_t *mode, struct posix_acl **acl);
int ferrofs_posix_acl_chmod(struct posix_acl **acl, umode_t mode);
struct posix_acl *ferrofs_get_inode_acl(struct inode *inode, int type);
void ferrofs_set_cached_acl(struct inode *inode, int type, struct posix_acl *acl);
u32 ferrofs_fileattr_flags(const struct fileattr *fa);
bool ferrofs_fileattr_has_fsx(const struct fileattr *fa);
void ferrofs_fileattr_fill_flags(struct fileattr *fa, u32 flags);
#endif
