// Temporary files that a SIGINT/SIGTERM handler must remove: outputs are written to a temporary beside their target
// and renamed when complete, and a kill in between must not leave the temporary behind. Fixed storage, so that the
// handler needs nothing but unlink (async-signal-safe).
#pragma once
#include <string>

namespace te {

// Registers `path` (an existing temporary); returns its slot, or -1 when all slots are taken or the path is too
// long (the file is then still removed on errors, just not on a signal).
int register_temp_file(const std::string& path);
// After the temporary was renamed or removed.
void forget_temp_file(int slot);
// Unlinks every registered temporary. Async-signal-safe.
void remove_temp_files_signal_safe();

}  // namespace te
