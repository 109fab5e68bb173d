// SPDX-License-Identifier: GPL-2.0
/*
 * faulty.ko: a deliberately broken module that the harness self-test loads in the guest to prove
 * that run-guest.sh fails loudly on each kind of kernel failure. mode=warn|oops|panic|ferrofs-error|kasan.
 */
#include <linux/module.h>
#include <linux/kernel.h>
#include <linux/string.h>
#include <linux/slab.h>

static char *mode = "none";
module_param(mode, charp, 0444);
MODULE_PARM_DESC(mode, "what to break: none, warn, oops, panic, ferrofs-error, kasan");

static int __init faulty_init(void)
{
	if (!strcmp(mode, "warn"))
		WARN(1, "faulty: deliberate warning\n");
	else if (!strcmp(mode, "oops"))
		*(volatile int *)NULL = 1;
	else if (!strcmp(mode, "panic"))
		panic("faulty: deliberate panic\n");
	else if (!strcmp(mode, "ferrofs-error"))
		pr_err("ferrofs (faulty): error: deliberate ferrofs error message\n");
	else if (!strcmp(mode, "kasan")) {
		/* A write past the end of a heap object: KASAN reports it on the debug kernel. */
		volatile char *p = kmalloc(16, GFP_KERNEL);

		if (p) {
			p[16] = 1;
			kfree((void *)p);
		}
	}
	return 0;
}

static void __exit faulty_exit(void) { }

module_init(faulty_init);
module_exit(faulty_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Deliberately broken module for testing the ferrofs guest harness");
