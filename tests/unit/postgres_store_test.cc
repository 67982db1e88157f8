// PostgresStore on a private PostgreSQL (tests/unit/private_postgres.h): the schema and its migration, records
// the database holds that do not decode, a failing batch, the leader-lease fence on commits, and a database that
// goes away and comes back. The Store contract itself runs in storage_test.cc. Every test skips, saying why,
// when PostgreSQL's binaries are not installed.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "storage/group_committer.h"
#include "storage/postgres_store.h"
#include "tests/unit/private_postgres.h"

namespace gpupack {
namespace {

using ::testing::HasSubstr;

Task SomeTask(const std::string& arn) {
  Task t;
  t.arn = arn;
  t.cluster = "gpu";
  t.version = 1;
  return t;
}

// The one private PostgreSQL of this binary; each test takes a database of its own.
class PostgresStoreTest : public testing::PrivatePostgresTest {
 protected:
  std::unique_ptr<PostgresStore> OpenOrFail(PostgresStore::Options options = {}) {
    auto s = PostgresStore::Open(uri_, options);
    EXPECT_TRUE(s.ok()) << s.status().message();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  bool Sql(const std::string& sql) { return pg_->Psql(sql, uri_.substr(uri_.rfind('/') + 1)); }
};

TEST_F(PostgresStoreTest, SchemaVersionIsRecordedAndReopeningKeepsTheData) {
  {
    auto store = OpenOrFail();
    ASSERT_TRUE(store);
    auto settings = store->ReadSettings();
    ASSERT_TRUE(settings.ok()) << settings.status().message();
    EXPECT_EQ(settings->schema_version, PostgresStore::LatestSchemaVersion());
    EXPECT_EQ(settings->synchronous_commit, "on");
    WriteBatch b;
    b.PutTask(SomeTask("arn:t/1"));
    ASSERT_TRUE(store->Commit(b).ok());
  }
  auto again = OpenOrFail();
  ASSERT_TRUE(again);
  auto snap = again->Load();
  ASSERT_TRUE(snap.ok()) << snap.status().message();
  ASSERT_EQ(snap->tasks.size(), 1u);
  EXPECT_EQ(snap->tasks[0].arn, "arn:t/1");
  auto versions = again->Query("SELECT count(*) FROM gpupack_schema_version");
  ASSERT_TRUE(versions.ok());
  EXPECT_EQ((*versions)[0][0], std::to_string(PostgresStore::LatestSchemaVersion()));
}

TEST_F(PostgresStoreTest, ServersOpeningOneNewDatabaseTogetherMigrateItOnce) {
  std::vector<std::thread> threads;
  std::vector<Status> results(4);
  for (size_t i = 0; i < results.size(); ++i)
    threads.emplace_back([&, i] {
      auto s = PostgresStore::Open(uri_);
      results[i] = s.ok() ? Status::Ok() : s.status();
    });
  for (auto& t : threads) t.join();
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.message();
  auto store = OpenOrFail();
  ASSERT_TRUE(store);
  auto rows = store->Query("SELECT count(*) FROM gpupack_schema_version");
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ((*rows)[0][0], std::to_string(PostgresStore::LatestSchemaVersion()));
}

TEST_F(PostgresStoreTest, NewerSchemaIsRefused) {
  ASSERT_TRUE(OpenOrFail());
  ASSERT_TRUE(Sql("INSERT INTO gpupack_schema_version (version) VALUES (99)"));
  auto s = PostgresStore::Open(uri_);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("schema version is 99, newer than this gpupack binary"));
}

TEST_F(PostgresStoreTest, CorruptDocIsReportedWithTableAndKey) {
  auto store = OpenOrFail();
  ASSERT_TRUE(store);
  WriteBatch b;
  b.PutTask(SomeTask("arn:t/good"));
  b.PutTask(SomeTask("arn:t/bad"));
  ASSERT_TRUE(store->Commit(b).ok());
  ASSERT_TRUE(Sql("UPDATE tasks SET doc = '{not json' WHERE arn = 'arn:t/bad'"));
  auto snap = store->Load();
  ASSERT_FALSE(snap.ok());
  EXPECT_THAT(snap.status().message(), HasSubstr("corrupt record in table tasks, key 'arn:t/bad'"));
  // The store stays usable.
  ASSERT_TRUE(Sql("DELETE FROM tasks WHERE arn = 'arn:t/bad'"));
  auto after = store->Load();
  ASSERT_TRUE(after.ok()) << after.status().message();
  EXPECT_EQ(after->tasks.size(), 1u);
}

TEST_F(PostgresStoreTest, FailedBatchAppliesNothingAndNamesTheFailure) {
  auto store = OpenOrFail();
  ASSERT_TRUE(store);
  ASSERT_TRUE(Sql("CREATE FUNCTION refuse() RETURNS trigger AS \\$\\$ BEGIN RAISE EXCEPTION 'refused by test'; "
                  "END \\$\\$ LANGUAGE plpgsql; CREATE TRIGGER no_tokens BEFORE INSERT ON client_tokens "
                  "FOR EACH ROW EXECUTE FUNCTION refuse()"));
  WriteBatch b;
  b.PutTask(SomeTask("arn:t/1"));
  ClientTokenRecord r;
  r.cluster = "gpu";
  r.token = "tok";
  b.PutClientToken(r);
  Status s = store->Commit(b);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("writing client_tokens"));
  EXPECT_THAT(s.message(), HasSubstr("refused by test"));
  EXPECT_THAT(s.message(), HasSubstr("nothing of the batch was applied"));
  auto snap = store->Load();
  ASSERT_TRUE(snap.ok());
  EXPECT_TRUE(snap->tasks.empty());
  WriteBatch ok;
  ok.PutTask(SomeTask("arn:t/2"));
  EXPECT_TRUE(store->Commit(ok).ok());
}

TEST_F(PostgresStoreTest, AFencedCommitWritesOnlyWhileItsLeaseIsHeld) {
  auto store = OpenOrFail();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->Query("UPDATE gpupack_leader_lease SET holder = 'a', epoch = 1, "
                           "expires_at = now() + interval '1 hour'")
                  .ok());
  store->SetFence(PostgresStore::Fence{"a", 1});
  WriteBatch first;
  first.PutTask(SomeTask("arn:t/1"));
  EXPECT_TRUE(store->Commit(first).ok());

  // Another server takes over: a higher epoch. The old holder's commits are refused and write nothing.
  ASSERT_TRUE(store->Query("UPDATE gpupack_leader_lease SET holder = 'b', epoch = 2").ok());
  WriteBatch second;
  second.PutTask(SomeTask("arn:t/2"));
  Status refused = store->Commit(second);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.code(), ErrorCode::kConflict);
  EXPECT_THAT(refused.message(), HasSubstr("no longer holds the leader lease (epoch 1)"));

  // An expired lease, even under the right epoch, is not held either (the database's clock decides).
  ASSERT_TRUE(store->Query("UPDATE gpupack_leader_lease SET holder = 'a', epoch = 1, expires_at = now()").ok());
  EXPECT_EQ(store->Commit(second).code(), ErrorCode::kConflict);

  auto snap = store->Load();
  ASSERT_TRUE(snap.ok());
  ASSERT_EQ(snap->tasks.size(), 1u);
  EXPECT_EQ(snap->tasks[0].arn, "arn:t/1");
}

TEST_F(PostgresStoreTest, AFencedCommitThatLostTheLeaseWritesNoneOfItsStatements) {
  // A commit sends all its statements at once (one pipeline): the fence check failing must stop every write
  // after it, of every kind, and leave the connection usable.
  auto store = OpenOrFail();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->Query("UPDATE gpupack_leader_lease SET holder = 'a', epoch = 1, "
                           "expires_at = now() + interval '1 hour'")
                  .ok());
  store->SetFence(PostgresStore::Fence{"a", 1});
  WriteBatch first;
  first.PutTask(SomeTask("arn:t/1"));
  ASSERT_TRUE(store->Commit(first).ok());

  WriteBatch mixed;
  Cluster c;
  c.name = "gpu";
  mixed.PutCluster(c);
  mixed.PutTask(SomeTask("arn:t/2"));
  ClientTokenRecord r;
  r.cluster = "gpu";
  r.token = "tok";
  mixed.PutClientToken(r);
  mixed.DeleteTask("arn:t/1");
  ASSERT_TRUE(store->Query("UPDATE gpupack_leader_lease SET epoch = 2").ok());
  EXPECT_EQ(store->Commit(mixed).code(), ErrorCode::kConflict);
  auto snap = store->Load();
  ASSERT_TRUE(snap.ok()) << snap.status().message();
  EXPECT_TRUE(snap->clusters.empty());
  EXPECT_TRUE(snap->client_tokens.empty());
  ASSERT_EQ(snap->tasks.size(), 1u);
  EXPECT_EQ(snap->tasks[0].arn, "arn:t/1");

  // Held again (a new epoch of its own): the same batch commits whole on the same connection.
  store->SetFence(PostgresStore::Fence{"a", 2});
  ASSERT_TRUE(store->Commit(mixed).ok());
  snap = store->Load();
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(snap->clusters.size(), 1u);
  EXPECT_EQ(snap->client_tokens.size(), 1u);
  ASSERT_EQ(snap->tasks.size(), 1u);
  EXPECT_EQ(snap->tasks[0].arn, "arn:t/2");
}

TEST_F(PostgresStoreTest, ACommitAfterTheDatabaseRestartedWhileIdleReconnectsFirst) {
  testing::PrivatePostgres* const pg = OwnServer();  // restarted below: never the run's shared server
  ASSERT_NE(pg, nullptr);
  auto store = OpenOrFail();
  ASSERT_TRUE(store);
  WriteBatch b;
  b.PutTask(SomeTask("arn:t/1"));
  ASSERT_TRUE(store->Commit(b).ok());
  const int port = pg->port();
  pg->Stop();
  std::string error;
  ASSERT_TRUE(pg->Start(&error)) << error;
  if (pg->port() != port) GTEST_SKIP() << "the database came back on another port; the URI names the old one";
  // The connection the store holds was closed by the restart: the commit notices before sending anything and
  // connects afresh, so it does not fail.
  b.PutTask(SomeTask("arn:t/2"));
  Status s = store->Commit(b);
  EXPECT_TRUE(s.ok()) << s.message();
  auto snap = store->Load();
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(snap->tasks.size(), 2u);
}

TEST_F(PostgresStoreTest, ADatabaseThatGoesAwayFailsCallsInTimeAndTheStoreResumesWhenItIsBack) {
  testing::PrivatePostgres* const pg = OwnServer();  // stopped below: never the run's shared server
  ASSERT_NE(pg, nullptr);
  auto store = OpenOrFail(PostgresStore::Options{std::chrono::milliseconds(2000)});
  ASSERT_TRUE(store);
  pg->Stop();
  WriteBatch b;
  b.PutTask(SomeTask("arn:t/1"));
  const auto started = std::chrono::steady_clock::now();
  Status down = store->Commit(b);
  EXPECT_FALSE(down.ok());
  EXPECT_EQ(down.code(), ErrorCode::kServer);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
  EXPECT_FALSE(store->Load().ok());
  std::string error;
  ASSERT_TRUE(pg->Start(&error)) << error;
  // The server may come back on another port only if its own was taken meanwhile; the URI names the port.
  auto again = PostgresStore::Open(pg->Uri(uri_.substr(uri_.rfind('/') + 1)));
  ASSERT_TRUE(again.ok()) << again.status().message();
  Status resumed = Status::Server("not tried");
  for (int i = 0; i < 50 && !resumed.ok(); ++i) {  // the same store reconnects by itself
    resumed = store->Commit(b);
    if (!resumed.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(resumed.ok()) << resumed.message();
  auto snap = (*again)->Load();
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(snap->tasks.size(), 1u);
}

TEST_F(PostgresStoreTest, GroupCommitOverPostgresAnswersEveryBatchOnceDurable) {
  auto store = OpenOrFail();
  ASSERT_TRUE(store);
  std::atomic<int> ok{0};
  {
    GroupCommitter committer(*store);
    for (int i = 0; i < 200; ++i) {
      WriteBatch b;
      b.PutTask(SomeTask("arn:t/" + std::to_string(i)));
      committer.Submit(std::move(b), [&](Status s) {
        if (s.ok()) ++ok;
      });
    }
    committer.Flush();
    EXPECT_LE(committer.commits(), 200u);
  }
  EXPECT_EQ(ok.load(), 200);
  auto snap = store->Load();
  ASSERT_TRUE(snap.ok());
  ASSERT_EQ(snap->tasks.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(snap->tasks[static_cast<size_t>(i)].arn, "arn:t/" + std::to_string(i));
}

TEST(PostgresStoreUriTest, UrisAreRecognizedAndPasswordsRedacted) {
  EXPECT_TRUE(PostgresStore::IsUri("postgres://h/db"));
  EXPECT_TRUE(PostgresStore::IsUri("postgresql://u@h:5432/db"));
  EXPECT_FALSE(PostgresStore::IsUri("/var/lib/gpupack/state.db"));
  EXPECT_EQ(PostgresStore::Redacted("postgresql://u:secret@h:5432/db"), "postgresql://u:***@h:5432/db");
  EXPECT_EQ(PostgresStore::Redacted("postgres://h/db?user=u&password=secret&x=1"),
            "postgres://h/db?user=u&password=***&x=1");
  auto bad = PostgresStore::Open("postgresql://u:secret@127.0.0.1:1/db",
                                 PostgresStore::Options{std::chrono::milliseconds(2000)});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("u:***@127.0.0.1:1"));
  EXPECT_THAT(bad.status().message(), ::testing::Not(HasSubstr("secret")));
}

}  // namespace
}  // namespace gpupack
