/*
 * SysV shared memory for fio in the bench guests, whose kernel has no CONFIG_SYSVIPC.
 *
 * fio keeps its job table in a SysV segment (shmget + shmat, removed with shmctl(IPC_RMID)) and
 * stops with "failed to setup shm segment" when shmget fails. Preloaded (LD_PRELOAD) into fio,
 * these replacements back each segment with a MAP_SHARED anonymous mapping made at shmget, which
 * fio's forked jobs inherit, as they would attach the SysV segment. Only what fio uses: private
 * segments (every key is treated as IPC_PRIVATE), shmat at any address, IPC_STAT (the size),
 * IPC_RMID and shmdt as no-ops (the mapping lives until fio exits).
 * Built by qemu/mkinitramfs.sh --fio-overlay.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>

#define MAXSEG 64
static struct {
	void *addr;
	size_t size;
	int used;
} seg[MAXSEG];

int shmget(key_t key, size_t size, int flags)
{
	(void)key;
	(void)flags;
	for (int i = 0; i < MAXSEG; i++) {
		if (seg[i].used)
			continue;
		void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED) {
			errno = ENOMEM;
			return -1;
		}
		seg[i].addr = p;
		seg[i].size = size;
		seg[i].used = 1;
		return i + 1;
	}
	errno = ENOSPC;
	return -1;
}

static int valid(int id)
{
	return id >= 1 && id <= MAXSEG && seg[id - 1].used;
}

void *shmat(int id, const void *addr, int flags)
{
	(void)addr;
	(void)flags;
	if (!valid(id)) {
		errno = EINVAL;
		return (void *)-1;
	}
	return seg[id - 1].addr;
}

int shmdt(const void *addr)
{
	(void)addr;
	return 0;
}

int shmctl(int id, int cmd, struct shmid_ds *buf)
{
	if (!valid(id)) {
		errno = EINVAL;
		return -1;
	}
	if (cmd == IPC_STAT && buf) {
		memset(buf, 0, sizeof(*buf));
		buf->shm_segsz = seg[id - 1].size;
	}
	return 0;
}
