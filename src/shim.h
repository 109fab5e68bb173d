/* SPDX-License-Identifier: GPL-2.0 */
/* Prototypes of the ferrofs C shim (src/shim.c); the Rust side declares the same in extern blocks. */
#ifndef FERROFS_SHIM_H
#define FERROFS_SHIM_H
#include <linux/fs.h>
#include <linux/fs_context.h>
#include <linux/mtd/mtd.h>

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
const char *ferrofs_mtd_name(const struct mtd_info *mtd);
int ferrofs_mtd_index(const struct mtd_info *mtd);
bool ferrofs_mtd_can_have_bb(const struct mtd_info *mtd);
int ferrofs_mtd_read(struct mtd_info *mtd, loff_t from, size_t len, size_t *retlen, u_char *buf);
int ferrofs_mtd_write(struct mtd_info *mtd, loff_t to, size_t len, size_t *retlen, const u_char *buf);
int ferrofs_mtd_erase(struct mtd_info *mtd, loff_t addr, u64 len);
int ferrofs_mtd_block_isbad(struct mtd_info *mtd, loff_t ofs);
int ferrofs_mtd_block_markbad(struct mtd_info *mtd, loff_t ofs);
void ferrofs_mtd_sync(struct mtd_info *mtd);

#endif
