#include "coordinator/grpc_streams.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <utility>

#include "common/log_follow.h"
#include "coordinator/grpc_service.h"
#include "coordinator/grpc_write_queue.h"
#include "coordinator/job_facts.h"

namespace trainctl::coord {
namespace {

// A server stream refused before it started (authentication, access): ends
// at once with `status`.
template <typename Msg>
class RefusedStream : public grpc::ServerWriteReactor<Msg> {
 public:
  explicit RefusedStream(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

// A server stream that writes one message at a time: once a write is done,
// Next() takes the next step; a failed write (the client gone) finishes the
// call CANCELLED. Deletes itself when the call is done.
template <typename Msg>
class OneWriteAtATime : public grpc::ServerWriteReactor<Msg> {
 public:
  void OnWriteDone(bool ok) override {
    if (!ok) {
      this->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    Next();
  }
  void OnDone() override { delete this; }

 protected:
  virtual void Next() = 0;
};

// One StreamLogs call: reads a rank's log chunk by chunk through the core
// (GetLogsAsync) and writes each chunk; with `follow`, when caught up it
// long-polls WaitJobAsync (kFollowPoll) and reads again, until the job is
// final and its log read to the end: common/log_follow.h's loop, the one
// `trainctl logs -f` runs. One core call or one write is in flight at a
// time; a cancelled call (client gone) finishes at the next step. The
// reactor deletes itself in OnDone.
class LogStream : public OneWriteAtATime<v1::StreamLogsResponse> {
 public:
  // Long-poll between reads of a followed log that has no new data, ms.
  static constexpr absl::Duration kFollowPoll = absl::Seconds(1);

  LogStream(Coordinator* core, const v1::StreamLogsRequest& req)
      : core_(core), req_(req), log_(req.follow(), req.offset()) {
    if (req.offset() < 0 || req.rank() < 0) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          req.rank() < 0 ? "rank: must not be negative"
                                         : "offset: must not be negative"));
      return;
    }
    // Headers now, so a REST client sees the response start before the
    // first byte of a log that has none yet.
    StartSendInitialMetadata();
    Read();
  }

  void OnCancel() override { cancelled_ = true; }

 private:
  void Next() override { Step(after_write_, absl::OkStatus()); }

  void Read() {
    if (cancelled_) {
      Finish(grpc::Status::CANCELLED);
      return;
    }
    core_->GetLogsAsync(req_.job_id(), req_.rank(), log_.offset(), /*max_bytes=*/0,
                        [this](absl::StatusOr<v1::GetLogsResponse> r) { OnRead(std::move(r)); });
  }

  void OnRead(absl::StatusOr<v1::GetLogsResponse> r) {
    const int64_t offset = log_.offset();
    const LogFollow::Next next = log_.OnRead(r);
    if (r.ok() && (!r->data().empty() || r->eof())) {
      last_.Clear();
      last_.set_offset(offset);
      last_.set_data(std::move(*r->mutable_data()));
      last_.set_next_offset(r->next_offset());
      last_.set_attempt(std::max(log_.attempt(), 0));
      last_.set_eof(r->eof());
      after_write_ = next;
      StartWrite(&last_);  // OnWriteDone takes the next step
      return;
    }
    Step(next, r.status());
  }

  // Takes step `next` of the loop; `error` is the failed read's status.
  void Step(LogFollow::Next next, const absl::Status& error) {
    switch (next) {
      case LogFollow::Next::kDone:
        Finish(grpc::Status::OK);
        return;
      case LogFollow::Next::kFail:
        Finish(ToGrpcStatus(error));
        return;
      case LogFollow::Next::kRead:
        Read();
        return;
      case LogFollow::Next::kWait:
        if (cancelled_) {
          Finish(grpc::Status::CANCELLED);
          return;
        }
        core_->WaitJobAsync(req_.job_id(), kFollowPoll,
                            [this](absl::StatusOr<v1::Job> job) { OnWaited(std::move(job)); });
        return;
    }
  }

  void OnWaited(absl::StatusOr<v1::Job> job) {
    if (!job.ok()) {
      Finish(ToGrpcStatus(job.status()));
      return;
    }
    log_.OnWaited(*job, IsFinal(job->state()));
    Read();
  }

  Coordinator* const core_;
  const v1::StreamLogsRequest req_;
  std::atomic<bool> cancelled_{false};
  // The rest is touched by one step at a time (one call or write in flight).
  LogFollow log_;
  // The step after the chunk being written.
  LogFollow::Next after_write_ = LogFollow::Next::kRead;
  v1::StreamLogsResponse last_;  // the chunk being written
};

// One ListHistory call: writes the history page by page
// (Accounting::HistoryPage), reading the next page from the store only once
// the previous one is written, so a million rows never sit in memory. The
// reactor deletes itself in OnDone.
class HistoryStream : public OneWriteAtATime<v1::ListHistoryResponse> {
 public:
  HistoryStream(const Accounting* accounting, HistoryQuery query)
      : accounting_(accounting), query_(std::move(query)) {
    Next();
  }

 private:
  void Next() override {
    while (!cursor_.done) {
      absl::StatusOr<v1::ListHistoryResponse> page = accounting_->HistoryPage(query_, cursor_);
      if (!page.ok()) {
        Finish(ToGrpcStatus(page.status()));
        return;
      }
      if (page->records_size() == 0) continue;
      page_ = std::move(*page);
      StartWrite(&page_);  // OnWriteDone asks for the next
      return;
    }
    Finish(grpc::Status::OK);
  }

  const Accounting* const accounting_;
  const HistoryQuery query_;
  Accounting::HistoryCursor cursor_;
  v1::ListHistoryResponse page_;  // the page being written
};

// One Session call (`trainctl exec`, `shell`, `attach`, `port-forward`):
// the first message opens the session through the relay (session_relay.h,
// which checks who may), later ones go to it; the relay sends output and the
// end back through Send and End. Writes are queued (QueuedWriteReactor);
// End finishes after what is queued. Deletes itself in OnDone, after telling
// the relay its client is gone (the agent then kills the command).
class SessionStream
    : public QueuedWriteReactor<v1::SessionClientMessage, v1::SessionServerMessage>,
      public SessionClient {
 public:
  SessionStream(SessionRelay* relay, absl::StatusOr<Principal> who)
      : relay_(relay), who_(std::move(who)) {
    if (!who_.ok()) {
      FinishNow(ToGrpcStatus(who_.status()));
      return;
    }
    StartRead(&in_);
  }

  void Send(v1::SessionServerMessage msg) override { Queue(std::move(msg)); }

  void End(const absl::Status& status) override { FinishAfterQueued(ToGrpcStatus(status)); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client closed its side or went away: the session ends.
      if (!id_.empty()) relay_->ClientGone(id_);
      FinishNow(grpc::Status(grpc::StatusCode::CANCELLED, "the client ended the session"));
      return;
    }
    if (id_.empty()) {
      if (!in_.has_open()) {
        FinishNow(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                "open: the first message of a session must open it"));
        return;
      }
      absl::StatusOr<std::string> id = relay_->Open(*who_, in_.open(), this);
      if (!id.ok()) {
        FinishNow(ToGrpcStatus(id.status()));
        return;
      }
      id_ = *id;
    } else {
      absl::Status s = relay_->FromClient(id_, in_);
      if (absl::IsInvalidArgument(s)) {
        relay_->ClientGone(id_);
        FinishNow(ToGrpcStatus(s));
        return;
      }
      // NOT_FOUND: the session has ended; its end is on its way.
    }
    StartRead(&in_);
  }

  void OnDone() override {
    if (!id_.empty()) relay_->ClientGone(id_);
    delete this;
  }

 private:
  SessionRelay* const relay_;
  const absl::StatusOr<Principal> who_;
  // Read and written only by the reactor's read callbacks and OnDone.
  std::string id_;
  v1::SessionClientMessage in_;
};

}  // namespace

grpc::ServerWriteReactor<v1::StreamLogsResponse>* NewLogStream(Coordinator* core,
                                                              const v1::StreamLogsRequest& req) {
  return new LogStream(core, req);
}

grpc::ServerWriteReactor<v1::StreamLogsResponse>* NewRefusedLogStream(const grpc::Status& status) {
  return new RefusedStream<v1::StreamLogsResponse>(status);
}

grpc::ServerWriteReactor<v1::ListHistoryResponse>* NewHistoryStream(const Accounting* accounting,
                                                                    HistoryQuery query) {
  return new HistoryStream(accounting, std::move(query));
}

grpc::ServerWriteReactor<v1::ListHistoryResponse>* NewRefusedHistoryStream(
    const grpc::Status& status) {
  return new RefusedStream<v1::ListHistoryResponse>(status);
}

grpc::ServerBidiReactor<v1::SessionClientMessage, v1::SessionServerMessage>* NewSessionStream(
    SessionRelay* relay, absl::StatusOr<Principal> who) {
  return new SessionStream(relay, std::move(who));
}

}  // namespace trainctl::coord
