// SPDX-License-Identifier: GPL-2.0
/*
 * ferrofs C shim: one-line wrappers for what Rust cannot call directly (static inline
 * functions, macros, and MTD, whose headers the 6.12 Rust bindings do not include).
 * No logic lives here: every function is a single call or field access.
 */
#include <linux/fs.h>
#include <linux/fs_context.h>
#include <linux/mtd/mtd.h>
#include <linux/mtd/super.h>
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
const char *ferrofs_mtd_name(const struct mtd_info *mtd) { return mtd->name; }
int ferrofs_mtd_index(const struct mtd_info *mtd) { return mtd->index; }
bool ferrofs_mtd_can_have_bb(const struct mtd_info *mtd) { return mtd_can_have_bb(mtd); }

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
