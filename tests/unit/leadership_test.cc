// LeaseKeeper (api/leadership.h) on a private PostgreSQL: who takes the lease, when, and under which epoch. The
// replicas themselves (roles, forwarding, takeover of a killed leader) are tested as processes in
// tests/integration/ha_*.test.mjs. Skips, saying why, when PostgreSQL's binaries are not installed.
#include <chrono>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "api/leadership.h"
#include "storage/postgres_store.h"
#include "tests/unit/private_postgres.h"

namespace gpupack::api {
namespace {

using std::chrono::milliseconds;

class LeaseKeeperTest : public testing::PrivatePostgresTest {
 protected:
  void SetUp() override {
    PrivatePostgresTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    for (auto* slot : {&a_db_, &b_db_}) {
      auto s = PostgresStore::Open(uri_);
      ASSERT_TRUE(s.ok()) << s.status().message();
      *slot = std::move(s).value();
    }
  }
  // Expire ends the lease now, as if its holder had stopped renewing it a while ago.
  void Expire() { ASSERT_TRUE(a_db_->Query("UPDATE gpupack_leader_lease SET expires_at = now()").ok()); }

  std::unique_ptr<PostgresStore> a_db_, b_db_;
};

TEST_F(LeaseKeeperTest, TheFirstTakesTheLeaseAndTheOtherLearnsWhoLeads) {
  LeaseKeeper a(*a_db_, "a", "http://a:1", milliseconds(60000));
  LeaseKeeper b(*b_db_, "b", "http://b:1", milliseconds(60000));
  auto va = a.Step(0, false);
  ASSERT_TRUE(va.ok()) << va.status().message();
  EXPECT_TRUE(va->held);
  EXPECT_EQ(va->epoch, 1);
  auto vb = b.Step(0, false);
  ASSERT_TRUE(vb.ok());
  EXPECT_FALSE(vb->held);
  EXPECT_EQ(vb->leader, "http://a:1");
  EXPECT_TRUE(vb->leader_alive);
  EXPECT_EQ(vb->epoch, 1);
  // Renewing keeps the epoch; a bump (the leader reloads) raises it.
  auto renewed = a.Step(1, false);
  ASSERT_TRUE(renewed.ok());
  EXPECT_TRUE(renewed->held);
  EXPECT_EQ(renewed->epoch, 1);
  auto bumped = a.Step(1, true);
  ASSERT_TRUE(bumped.ok());
  EXPECT_TRUE(bumped->held);
  EXPECT_EQ(bumped->epoch, 2);
}

TEST_F(LeaseKeeperTest, AnExpiredLeaseGoesToTheNextWithAHigherEpochAndTheOldHolderLearnsIt) {
  LeaseKeeper a(*a_db_, "a", "http://a:1", milliseconds(60000));
  LeaseKeeper b(*b_db_, "b", "http://b:1", milliseconds(60000));
  ASSERT_TRUE(a.Step(0, false)->held);
  Expire();
  auto vb = b.Step(0, false);
  ASSERT_TRUE(vb.ok());
  EXPECT_TRUE(vb->held);
  EXPECT_EQ(vb->epoch, 2);
  // The old holder's renewal finds the lease gone (and cannot take it back: it has not expired).
  auto va = a.Step(1, false);
  ASSERT_TRUE(va.ok());
  EXPECT_FALSE(va->held);
  EXPECT_EQ(va->leader, "http://b:1");
  EXPECT_EQ(va->epoch, 2);
}

TEST_F(LeaseKeeperTest, ARestartedServerOnTheSameUrlTakesItsLeaseBackAtOnce) {
  LeaseKeeper before(*a_db_, "a-old", "http://a:1", milliseconds(60000));
  ASSERT_TRUE(before.Step(0, false)->held);
  LeaseKeeper after(*b_db_, "a-new", "http://a:1", milliseconds(60000));
  auto v = after.Step(0, false);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->held);
  EXPECT_EQ(v->epoch, 2);
  auto old = before.Step(1, false);
  ASSERT_TRUE(old.ok());
  EXPECT_FALSE(old->held);  // the old process (if it still ran) is deposed: its epoch is gone
}

TEST_F(LeaseKeeperTest, AReleasedLeaseIsTakenAtTheNextStepWithoutWaitingForItsTtl) {
  LeaseKeeper a(*a_db_, "a", "http://a:1", milliseconds(600000));
  LeaseKeeper b(*b_db_, "b", "http://b:1", milliseconds(600000));
  ASSERT_TRUE(a.Step(0, false)->held);
  EXPECT_FALSE(b.Step(0, false)->held);
  // Releasing an epoch that is not the holder's changes nothing.
  ASSERT_TRUE(a.Release(7).ok());
  EXPECT_FALSE(b.Step(0, false)->held);
  ASSERT_TRUE(a.Release(1).ok());
  auto vb = b.Step(0, false);
  ASSERT_TRUE(vb.ok());
  EXPECT_TRUE(vb->held);
  EXPECT_EQ(vb->epoch, 2);
}

TEST_F(LeaseKeeperTest, ACommitFencedByALostLeaseWritesNothing) {
  LeaseKeeper a(*a_db_, "a", "http://a:1", milliseconds(60000));
  LeaseKeeper b(*b_db_, "b", "http://b:1", milliseconds(60000));
  ASSERT_TRUE(a.Step(0, false)->held);
  a_db_->SetFence(PostgresStore::Fence{"a", 1});
  WriteBatch batch;
  Cluster c;
  c.name = "before";
  batch.PutCluster(c);
  EXPECT_TRUE(a_db_->Commit(batch).ok());
  Expire();
  ASSERT_TRUE(b.Step(0, false)->held);
  WriteBatch late;
  c.name = "after";
  late.PutCluster(c);
  EXPECT_EQ(a_db_->Commit(late).code(), ErrorCode::kConflict);
  auto snap = b_db_->Load();
  ASSERT_TRUE(snap.ok());
  ASSERT_EQ(snap->clusters.size(), 1u);
  EXPECT_EQ(snap->clusters[0].name, "before");
}

}  // namespace
}  // namespace gpupack::api
