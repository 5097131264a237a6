#ifndef TRAINCTL_COORDINATOR_GRPC_STREAMS_H_
#define TRAINCTL_COORDINATOR_GRPC_STREAMS_H_

// The user API's streaming calls, one reactor type each (grpc_service.h's
// UserApi makes them after authenticating the caller): a rank's log,
// followed or not (StreamLogs, common/log_follow.h's loop over the core's
// GetLogsAsync and WaitJobAsync); the accounting history page by page
// (ListHistory); an interactive session's bidirectional stream (Session,
// to and from the SessionRelay). Each writes one message at a time, as gRPC
// requires, and deletes itself when the call is done. Transport only.

#include "absl/status/statusor.h"
#include "coordinator/accounting.h"
#include "coordinator/auth.h"
#include "coordinator/coordinator.h"
#include "coordinator/session_relay.h"
#include "grpcpp/grpcpp.h"
#include "trainctl/v1/service.pb.h"

namespace trainctl::coord {

// One StreamLogs call for `req` over `core` (not owned). INVALID_ARGUMENT
// for a negative rank or offset; a read's error ends the call with it; a
// client gone ends it CANCELLED.
grpc::ServerWriteReactor<v1::StreamLogsResponse>* NewLogStream(Coordinator* core,
                                                              const v1::StreamLogsRequest& req);
// A StreamLogs call refused before it started (authentication, access): it
// ends at once with `status`.
grpc::ServerWriteReactor<v1::StreamLogsResponse>* NewRefusedLogStream(const grpc::Status& status);

// One ListHistory call: the pages of `query` from `accounting` (not owned),
// the next read only once the previous page is written, so a million rows
// never sit in memory. A page's error ends the call with it.
grpc::ServerWriteReactor<v1::ListHistoryResponse>* NewHistoryStream(const Accounting* accounting,
                                                                    HistoryQuery query);
// A ListHistory call refused before it started: ends at once with `status`.
grpc::ServerWriteReactor<v1::ListHistoryResponse>* NewRefusedHistoryStream(
    const grpc::Status& status);

// One Session call by `who` (its error ends the call at once) through
// `relay` (not owned): the first message opens, later ones go to the
// relay; output and the end come back through it.
grpc::ServerBidiReactor<v1::SessionClientMessage, v1::SessionServerMessage>* NewSessionStream(
    SessionRelay* relay, absl::StatusOr<Principal> who);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_GRPC_STREAMS_H_
