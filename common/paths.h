#ifndef TRAINCTL_COMMON_PATHS_H_
#define TRAINCTL_COMMON_PATHS_H_

#include <string>

namespace trainctl {

// trainctl's per-user data directory, as the XDG base directory spec places
// it: $XDG_DATA_HOME/trainctl, else $HOME/.local/share/trainctl (else under
// /tmp when HOME is unset).
std::string DefaultDataDir();

}  // namespace trainctl

#endif  // TRAINCTL_COMMON_PATHS_H_
