// The version of det's programs (det, det-master, det-agent), one for the whole build.
#ifndef DET_COMMON_VERSION_VERSION_H_
#define DET_COMMON_VERSION_VERSION_H_

namespace det {

inline constexpr char kDetVersion[] = "0.1.0";

}  // namespace det

#endif  // DET_COMMON_VERSION_VERSION_H_
