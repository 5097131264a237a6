#include "client/auth_channel.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_target.h"
#include "grpcpp/support/client_interceptor.h"

namespace trainctl::cli {
namespace {

namespace exp = ::grpc::experimental;

// Adds the `authorization` metadata to the call it is created for.
class BearerTokenInterceptor : public exp::Interceptor {
 public:
  explicit BearerTokenInterceptor(const std::string* value) : value_(value) {}

  void Intercept(exp::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            exp::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", *value_);
    }
    methods->Proceed();
  }

 private:
  const std::string* const value_;  // owned by the factory
};

class BearerTokenInterceptorFactory : public exp::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenInterceptorFactory(const std::string& token)
      : value_(absl::StrCat("Bearer ", token)) {}

  exp::Interceptor* CreateClientInterceptor(exp::ClientRpcInfo*) override {
    return new BearerTokenInterceptor(&value_);
  }

 private:
  const std::string value_;
};

}  // namespace

std::shared_ptr<grpc::Channel> MakeCoordinatorChannel(const Connection& connection,
                                                      const std::string& target) {
  grpc::ChannelArguments args;
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::InsecureChannelCredentials();
  if (!connection.ca_pem.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = connection.ca_pem;
    credentials = grpc::SslCredentials(ssl);
    if (connection.address.find(',') != std::string::npos) {
      args.SetSslTargetNameOverride(FirstHost(connection.address));
    }
  }
  std::vector<std::unique_ptr<exp::ClientInterceptorFactoryInterface>> interceptors;
  if (!connection.token.empty()) {
    interceptors.push_back(
        std::make_unique<BearerTokenInterceptorFactory>(connection.token));
  }
  return exp::CreateCustomChannelWithInterceptors(target, credentials, args,
                                                  std::move(interceptors));
}

}  // namespace trainctl::cli
