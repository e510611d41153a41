#include "common/rpc/context_upload.h"

#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::rpc {
namespace {

using ::testing::HasSubstr;

v1::CreateExperimentRequest Request() {
  v1::CreateExperimentRequest req;
  req.set_config_yaml("name: x\n");
  req.set_config_path("x.yaml");
  for (auto [path, bytes] : {std::pair{"train.sh", 10}, {"empty", 0}, {"data/big.bin", 2500000}}) {
    v1::ContextFile* f = req.add_context();
    f->set_path(path);
    f->set_content(std::string(bytes, 'b'));
    f->set_mode(0755);
  }
  return req;
}

std::vector<v1::CreateExperimentChunk> Split(const v1::CreateExperimentRequest& req) {
  std::vector<v1::CreateExperimentChunk> out;
  EXPECT_TRUE(SplitContext(req, [&](const v1::CreateExperimentChunk& c) {
    out.push_back(c);
    return true;
  }));
  return out;
}

// Adds `chunks` in order; the first error, else Finish's.
absl::StatusOr<v1::CreateExperimentRequest> Assemble(
    const std::vector<v1::CreateExperimentChunk>& chunks) {
  ContextAssembler assembler;
  for (const auto& c : chunks) {
    if (absl::Status st = assembler.Add(c); !st.ok()) return st;
  }
  return assembler.Finish();
}

TEST(ContextUpload, SplitThenAssembledIsTheSameRequest) {
  const v1::CreateExperimentRequest req = Request();
  std::vector<v1::CreateExperimentChunk> chunks = Split(req);
  // The request, then train.sh, empty (one empty piece), big.bin in three pieces.
  ASSERT_EQ(chunks.size(), 6u);
  EXPECT_EQ(chunks[0].request().context_size(), 0);
  EXPECT_EQ(chunks[0].context_files(), 3);
  EXPECT_EQ(chunks[0].context_bytes(), 2500010);
  for (size_t i = 1; i < chunks.size(); ++i) {
    EXPECT_LE(static_cast<int64_t>(chunks[i].file().content().size()), kMaxContextChunkBytes);
  }
  EXPECT_EQ(chunks[5].file().offset(), 2 << 20);
  absl::StatusOr<v1::CreateExperimentRequest> back = Assemble(chunks);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SerializeAsString(), req.SerializeAsString());
}

TEST(ContextUpload, AStreamThatEndsEarlyIsRefusedNamingWhatIsMissing) {
  std::vector<v1::CreateExperimentChunk> chunks = Split(Request());
  chunks.pop_back();
  EXPECT_EQ(Assemble(chunks).status().message(),
            "model context: file 'data/big.bin': the upload stopped after 2097152 of its "
            "2500000 bytes");
  chunks.resize(3);
  EXPECT_EQ(Assemble(chunks).status().message(),
            "model context: the upload stopped after 2 of 3 files (10 of 2500010 bytes)");
  EXPECT_EQ(Assemble({}).status().message(),
            "CreateExperimentStream: the stream carried no request");
}

TEST(ContextUpload, PiecesOutOfOrderOrPastALimitAreRefusedAtOnce) {
  const std::vector<v1::CreateExperimentChunk> good = Split(Request());
  struct Case {
    std::function<void(std::vector<v1::CreateExperimentChunk>&)> change;
    std::string error;
  };
  const std::vector<Case> cases = {
      {[](auto& c) { c.erase(c.begin()); }, "the first message must carry the request"},
      {[](auto& c) { c.push_back(c[0]); }, "only the first message carries the request"},
      {[](auto& c) { c[0].mutable_request()->add_context(); }, "the request's context must be empty"},
      {[](auto& c) { c[0].set_context_files(10001); }, "model context: 10001 files; at most 10000"},
      {[](auto& c) { c[0].set_context_bytes((64 << 20) + 1); },
       "model context: 67108865 bytes; at most 64 MiB are accepted"},
      {[](auto& c) { c[0].set_context_files(2); },
       "file 'data/big.bin': file 3 of a context declared to have 2"},
      {[](auto& c) { c[0].set_context_bytes(100); },
       "file 'data/big.bin': more than the 100 bytes declared for the context"},
      {[](auto& c) { c[4].mutable_file()->set_content(std::string((1 << 20) + 1, 'x')); },
       "file 'data/big.bin': a piece of 1048577 bytes; at most 1048576 per piece"},
      {[](auto& c) { c[4].mutable_file()->set_offset(3); },
       "file 'data/big.bin': a piece at offset 3 after 1048576 bytes"},
      {[](auto& c) { c[3].mutable_file()->set_offset(5); },
       "file 'data/big.bin': its first piece starts at offset 5, not 0"},
      {[](auto& c) { c[5].mutable_file()->set_size(4 << 20); },
       "file 'data/big.bin': pieces past its size of 2500000 bytes"},
      {[](auto& c) { c[2].mutable_file()->set_path("../escape"); },
       "file '../escape': a '..' component; paths stay inside the context"},
      {[](auto& c) { c[2].mutable_file()->set_path("/etc/passwd"); },
       "file '/etc/passwd': an absolute path"},
      {[](auto& c) {
         c.insert(c.begin() + 3, c[1]);
         c[0].set_context_files(4);
         c[0].set_context_bytes(2500020);
       },
       "file 'train.sh': appears twice"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.error);
    std::vector<v1::CreateExperimentChunk> chunks = good;
    c.change(chunks);
    absl::StatusOr<v1::CreateExperimentRequest> got = Assemble(chunks);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(got.status().message(), HasSubstr(c.error));
  }
}

TEST(ContextUpload, SplittingStopsAtTheFirstRefusedWrite) {
  int writes = 0;
  EXPECT_FALSE(SplitContext(Request(), [&](const v1::CreateExperimentChunk&) {
    return ++writes < 2;
  }));
  EXPECT_EQ(writes, 2);
}

}  // namespace
}  // namespace det::rpc
