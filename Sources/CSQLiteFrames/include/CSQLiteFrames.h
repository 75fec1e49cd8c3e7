#ifndef ABROVA_CSQLITEFRAMES_H
#define ABROVA_CSQLITEFRAMES_H

/// The name of the VFS that `abrova_frames_vfs_register` registers.
extern const char *const abrova_frames_vfs_name;

/// Registers, once, a VFS named `abrova_frames_vfs_name` over the default one, which writes each
/// WAL frame (its 24-byte header and its page) in one write call instead of two. Not the default:
/// a connection asks for it by name. Returns an SQLite result code; safe from any thread.
int abrova_frames_vfs_register(void);

#endif
