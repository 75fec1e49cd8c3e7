// A VFS over the default one that writes each WAL frame in one call.
//
// SQLite appends a frame to the WAL in two writes, the frame's 24-byte header and then its page
// at the next offset. Each is a system call, and in a transaction that changes a page or two (a
// local write) they cost more than the rest of the commit. Here a frame header written where the
// file's last write ended (a frame being appended) is held back, and goes down with its page as
// one write; any other call on the file first writes the header alone. So a header is held only
// between the two writes of one frame: the bytes reach the file in the order SQLite wrote them,
// every call returns when what SQLite asked of it is done, and a failed write fails the page's
// write, as it would have. Holding more (a transaction's frames until its commit frame) was tried
// and is wrong: frames of a transaction that spills and then rolls back stay held after it, with
// nothing of the WAL's to write them, and are written later over another connection's commit.

#include "CSQLiteFrames.h"

#include <pthread.h>
#include <sqlite3.h>
#include <string.h>

const char *const abrova_frames_vfs_name = "abrova-frames";

/// The size of a WAL frame's header (SQLite's file format).
enum { frame_header_size = 24 };

typedef struct {
    sqlite3_file base; // pMethods: frames_methods once the file below is open
    sqlite3_file *below; // the default VFS's file, allocated right after this struct
    int is_wal;
    int is_holding; // a frame header is held in `buffer`
    sqlite3_int64 held_offset; // where it goes
    sqlite3_int64 write_end; // where the last call, if a write, ended (-1: the last call was not one)
    unsigned char *buffer; // the held header, then room for the page after it
    int buffer_size;
} frames_file;

static sqlite3_vfs *below_vfs;
static sqlite3_vfs frames_vfs;
static int registration_result = SQLITE_ERROR;
static pthread_once_t registration = PTHREAD_ONCE_INIT;

/// Writes the held header, if any, by itself.
static int write_held(frames_file *file) {
    if (!file->is_holding) return SQLITE_OK;
    file->is_holding = 0;
    return file->below->pMethods->xWrite(file->below, file->buffer, frame_header_size, file->held_offset);
}

/// Makes `buffer` hold at least `size` bytes; `SQLITE_NOMEM` when it cannot.
static int reserve(frames_file *file, int size) {
    if (size <= file->buffer_size) return SQLITE_OK;
    unsigned char *grown = sqlite3_realloc(file->buffer, size);
    if (grown == NULL) return SQLITE_NOMEM;
    file->buffer = grown;
    file->buffer_size = size;
    return SQLITE_OK;
}

static int frames_close(sqlite3_file *handle) {
    frames_file *file = (frames_file *)handle;
    int held = write_held(file);
    int closed = file->below->pMethods->xClose(file->below);
    sqlite3_free(file->buffer);
    file->buffer = NULL;
    return held != SQLITE_OK ? held : closed;
}

static int frames_read(sqlite3_file *handle, void *data, int amount, sqlite3_int64 offset) {
    frames_file *file = (frames_file *)handle;
    file->write_end = -1;
    int rc = write_held(file);
    if (rc != SQLITE_OK) return rc;
    return file->below->pMethods->xRead(file->below, data, amount, offset);
}

static int frames_write(sqlite3_file *handle, const void *data, int amount, sqlite3_int64 offset) {
    frames_file *file = (frames_file *)handle;
    // Only a header that follows the last write is a frame being appended, whose page comes next.
    // SQLite also rewrites headers in place (once a transaction that wrote a page twice commits,
    // each after reading its frame); those go at once, the commit frame's among them.
    int is_header = file->is_wal && amount == frame_header_size && offset == file->write_end;
    file->write_end = offset + amount;
    if (file->is_holding) {
        if (!is_header && offset == file->held_offset + frame_header_size &&
            reserve(file, frame_header_size + amount) == SQLITE_OK) {
            memcpy(file->buffer + frame_header_size, data, (size_t)amount);
            file->is_holding = 0;
            int size = frame_header_size + amount;
            return file->below->pMethods->xWrite(file->below, file->buffer, size, file->held_offset);
        }
        int rc = write_held(file);
        if (rc != SQLITE_OK) return rc;
    }
    if (is_header && reserve(file, frame_header_size) == SQLITE_OK) {
        memcpy(file->buffer, data, frame_header_size);
        file->held_offset = offset;
        file->is_holding = 1;
        return SQLITE_OK;
    }
    return file->below->pMethods->xWrite(file->below, data, amount, offset);
}

// Every other call writes what is held first, then passes through.
#define FRAMES_FIRST_WRITE_HELD(handle)                  \
    frames_file *file = (frames_file *)(handle);         \
    file->write_end = -1;                                \
    do {                                                 \
        int held_rc = write_held(file);                  \
        if (held_rc != SQLITE_OK) return held_rc;        \
    } while (0)

static int frames_truncate(sqlite3_file *handle, sqlite3_int64 size) {
    FRAMES_FIRST_WRITE_HELD(handle);
    return file->below->pMethods->xTruncate(file->below, size);
}

static int frames_sync(sqlite3_file *handle, int flags) {
    FRAMES_FIRST_WRITE_HELD(handle);
    return file->below->pMethods->xSync(file->below, flags);
}

static int frames_file_size(sqlite3_file *handle, sqlite3_int64 *size) {
    FRAMES_FIRST_WRITE_HELD(handle);
    return file->below->pMethods->xFileSize(file->below, size);
}

static int frames_lock(sqlite3_file *handle, int level) {
    FRAMES_FIRST_WRITE_HELD(handle);
    return file->below->pMethods->xLock(file->below, level);
}

static int frames_unlock(sqlite3_file *handle, int level) {
    FRAMES_FIRST_WRITE_HELD(handle);
    return file->below->pMethods->xUnlock(file->below, level);
}

static int frames_check_reserved_lock(sqlite3_file *handle, int *result) {
    FRAMES_FIRST_WRITE_HELD(handle);
    return file->below->pMethods->xCheckReservedLock(file->below, result);
}

static int frames_file_control(sqlite3_file *handle, int op, void *argument) {
    FRAMES_FIRST_WRITE_HELD(handle);
    return file->below->pMethods->xFileControl(file->below, op, argument);
}

static int frames_sector_size(sqlite3_file *handle) {
    frames_file *file = (frames_file *)handle;
    return file->below->pMethods->xSectorSize(file->below);
}

static int frames_device_characteristics(sqlite3_file *handle) {
    frames_file *file = (frames_file *)handle;
    return file->below->pMethods->xDeviceCharacteristics(file->below);
}

static int frames_shm_map(sqlite3_file *handle, int region, int size, int extend, void volatile **memory) {
    FRAMES_FIRST_WRITE_HELD(handle);
    if (file->below->pMethods->iVersion < 2) return SQLITE_IOERR_SHMMAP;
    return file->below->pMethods->xShmMap(file->below, region, size, extend, memory);
}

static int frames_shm_lock(sqlite3_file *handle, int offset, int count, int flags) {
    FRAMES_FIRST_WRITE_HELD(handle);
    if (file->below->pMethods->iVersion < 2) return SQLITE_IOERR_SHMLOCK;
    return file->below->pMethods->xShmLock(file->below, offset, count, flags);
}

static void frames_shm_barrier(sqlite3_file *handle) {
    frames_file *file = (frames_file *)handle;
    if (file->below->pMethods->iVersion >= 2) file->below->pMethods->xShmBarrier(file->below);
}

static int frames_shm_unmap(sqlite3_file *handle, int delete_flag) {
    FRAMES_FIRST_WRITE_HELD(handle);
    if (file->below->pMethods->iVersion < 2) return SQLITE_OK;
    return file->below->pMethods->xShmUnmap(file->below, delete_flag);
}

static int frames_fetch(sqlite3_file *handle, sqlite3_int64 offset, int amount, void **pointer) {
    FRAMES_FIRST_WRITE_HELD(handle);
    if (file->below->pMethods->iVersion < 3) {
        *pointer = NULL; // no memory map: SQLite reads instead
        return SQLITE_OK;
    }
    return file->below->pMethods->xFetch(file->below, offset, amount, pointer);
}

static int frames_unfetch(sqlite3_file *handle, sqlite3_int64 offset, void *pointer) {
    frames_file *file = (frames_file *)handle;
    if (file->below->pMethods->iVersion < 3) return SQLITE_OK;
    return file->below->pMethods->xUnfetch(file->below, offset, pointer);
}

static const sqlite3_io_methods frames_methods = {
    3,
    frames_close,
    frames_read,
    frames_write,
    frames_truncate,
    frames_sync,
    frames_file_size,
    frames_lock,
    frames_unlock,
    frames_check_reserved_lock,
    frames_file_control,
    frames_sector_size,
    frames_device_characteristics,
    frames_shm_map,
    frames_shm_lock,
    frames_shm_barrier,
    frames_shm_unmap,
    frames_fetch,
    frames_unfetch,
};

static int frames_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *handle, int flags, int *out_flags) {
    (void)vfs;
    frames_file *file = (frames_file *)handle;
    memset(file, 0, sizeof(*file));
    file->below = (sqlite3_file *)(file + 1);
    int rc = below_vfs->xOpen(below_vfs, name, file->below, flags, out_flags);
    if (rc != SQLITE_OK || file->below->pMethods == NULL) {
        // SQLite closes a file only when its methods are set; the file below cleans up after itself.
        file->base.pMethods = NULL;
        return rc != SQLITE_OK ? rc : SQLITE_CANTOPEN;
    }
    file->is_wal = (flags & SQLITE_OPEN_WAL) != 0;
    file->write_end = -1;
    file->base.pMethods = &frames_methods;
    return SQLITE_OK;
}

static int frames_delete(sqlite3_vfs *vfs, const char *name, int sync_directory) {
    (void)vfs;
    return below_vfs->xDelete(below_vfs, name, sync_directory);
}

static int frames_access(sqlite3_vfs *vfs, const char *name, int flags, int *result) {
    (void)vfs;
    return below_vfs->xAccess(below_vfs, name, flags, result);
}

static int frames_full_pathname(sqlite3_vfs *vfs, const char *name, int size, char *out) {
    (void)vfs;
    return below_vfs->xFullPathname(below_vfs, name, size, out);
}

static void *frames_dl_open(sqlite3_vfs *vfs, const char *name) {
    (void)vfs;
    return below_vfs->xDlOpen(below_vfs, name);
}

static void frames_dl_error(sqlite3_vfs *vfs, int size, char *message) {
    (void)vfs;
    below_vfs->xDlError(below_vfs, size, message);
}

static void (*frames_dl_sym(sqlite3_vfs *vfs, void *library, const char *symbol))(void) {
    (void)vfs;
    return below_vfs->xDlSym(below_vfs, library, symbol);
}

static void frames_dl_close(sqlite3_vfs *vfs, void *library) {
    (void)vfs;
    below_vfs->xDlClose(below_vfs, library);
}

static int frames_randomness(sqlite3_vfs *vfs, int size, char *out) {
    (void)vfs;
    return below_vfs->xRandomness(below_vfs, size, out);
}

static int frames_sleep(sqlite3_vfs *vfs, int microseconds) {
    (void)vfs;
    return below_vfs->xSleep(below_vfs, microseconds);
}

static int frames_current_time(sqlite3_vfs *vfs, double *now) {
    (void)vfs;
    return below_vfs->xCurrentTime(below_vfs, now);
}

static int frames_get_last_error(sqlite3_vfs *vfs, int size, char *out) {
    (void)vfs;
    return below_vfs->xGetLastError ? below_vfs->xGetLastError(below_vfs, size, out) : 0;
}

static int frames_current_time_int64(sqlite3_vfs *vfs, sqlite3_int64 *now) {
    (void)vfs;
    if (below_vfs->iVersion >= 2 && below_vfs->xCurrentTimeInt64) {
        return below_vfs->xCurrentTimeInt64(below_vfs, now);
    }
    double days = 0;
    int rc = below_vfs->xCurrentTime(below_vfs, &days);
    *now = (sqlite3_int64)(days * 86400000.0);
    return rc;
}

static void register_once(void) {
    below_vfs = sqlite3_vfs_find(NULL);
    if (below_vfs == NULL) {
        registration_result = SQLITE_ERROR;
        return;
    }
    frames_vfs.iVersion = 2;
    frames_vfs.szOsFile = (int)sizeof(frames_file) + below_vfs->szOsFile;
    frames_vfs.mxPathname = below_vfs->mxPathname;
    frames_vfs.zName = abrova_frames_vfs_name;
    frames_vfs.xOpen = frames_open;
    frames_vfs.xDelete = frames_delete;
    frames_vfs.xAccess = frames_access;
    frames_vfs.xFullPathname = frames_full_pathname;
    frames_vfs.xDlOpen = frames_dl_open;
    frames_vfs.xDlError = frames_dl_error;
    frames_vfs.xDlSym = frames_dl_sym;
    frames_vfs.xDlClose = frames_dl_close;
    frames_vfs.xRandomness = frames_randomness;
    frames_vfs.xSleep = frames_sleep;
    frames_vfs.xCurrentTime = frames_current_time;
    frames_vfs.xGetLastError = frames_get_last_error;
    frames_vfs.xCurrentTimeInt64 = frames_current_time_int64;
    registration_result = sqlite3_vfs_register(&frames_vfs, 0);
}

int abrova_frames_vfs_register(void) {
    pthread_once(&registration, register_once);
    return registration_result;
}
