// What scrub (sluice/maintenance.h) keeps in a tier, read back: each copy's
// last result (scrub/status), which listings show.
//
// Thread-safety: a free function.
#ifndef SLUICE_PIPELINE_SCRUB_H_
#define SLUICE_PIPELINE_SCRUB_H_

#include "format/scrub_record.h"
#include "sluice/backend.h"
#include "sluice/maintenance.h"

namespace sluice {

// What the scrubs recorded on this tier: the last result of each copy (an
// empty record if there is none or it does not decode).
ScrubRecord ReadScrubStatus(Backend& backend);

}  // namespace sluice

#endif  // SLUICE_PIPELINE_SCRUB_H_
