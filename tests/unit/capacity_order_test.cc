// The order of a capacity provider's line beyond first come, first served: backfill (a task behind a head that
// does not fit starts first when it fits), the head's reservation once it has waited (the instance where it will
// fit soonest is held for it, so a stream of small tasks cannot starve it), GPU-memory quotas per provider and per
// team, and the wait figures the metrics publish. End to end below HTTP on a real SQLite file; the tests play the
// agents (SubmitTaskStateChange) and move the server's clock.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/operations/operations.h"
#include "tests/unit/ecs_test_server.h"
#include "tests/unit/temp_dir.h"

namespace gpupack::api {
namespace {

constexpr EpochMs kMinute = 60'000;

class CapacityOrderTest : public ::testing::Test {
 protected:
  testing_support::TempDir tmp_{"gpupack-order"};
  std::string db_ = tmp_.path() + "/state.db";
};

Json InProvider(const std::string& provider) {
  return Json::array({{{"name", kCapacityProviderAttribute}, {"value", provider}}});
}

Json Tag(const std::string& key, const std::string& value) { return {{"key", key}, {"value", value}}; }

// SetUpPool: cluster "default" with provider "pool" (its tags: `provider_tags`) associated.
void SetUpPool(EcsServer& s, Json provider_tags = Json::array()) {
  s.Ok("CreateCluster", Json::object());
  s.Ok("CreateCapacityProvider", {{"name", "pool"}, {"tags", provider_tags}});
  s.Ok("PutClusterCapacityProviders", {{"cluster", "default"},
                                       {"capacityProviders", Json::array({"pool"})},
                                       {"defaultCapacityProviderStrategy", Json::array()}});
}

std::string RunInPool(EcsServer& s, const std::string& family, Json tags = Json::array()) {
  Json r = s.Ok("RunTask", {{"taskDefinition", family},
                            {"capacityProviderStrategy", Json::array({{{"capacityProvider", "pool"}, {"weight", 1}}})},
                            {"tags", tags}});
  EXPECT_EQ(r["tasks"].size(), 1u) << r.dump();
  return r["tasks"].empty() ? "" : r["tasks"][0]["taskArn"].get<std::string>();
}

Json Described(EcsServer& s, const std::string& arn) {
  Json d = s.Ok("DescribeTasks", {{"tasks", Json::array({arn})}});
  return d["tasks"].empty() ? Json::object() : d["tasks"][0];
}
std::string StatusOf(EcsServer& s, const std::string& arn) { return Described(s, arn)["lastStatus"]; }
std::string InstanceOf(EcsServer& s, const std::string& arn) { return Described(s, arn).value("containerInstanceArn", ""); }

void Stop(EcsServer& s, const std::string& arn) {
  s.Ok("SubmitTaskStateChange", {{"task", arn}, {"status", "STOPPED"}, {"reason", "done"}});
}

TEST_F(CapacityOrderTest, ASmallerTaskBackfillsPastAHeadThatDoesNotFit) {
  EcsServer s(db_);
  SetUpPool(s);
  RegisterInstance(s, {10000}, 8192, 32768, InProvider("pool"));
  RegisterShared(s, "big", 6000);
  RegisterShared(s, "small", 3000);
  const std::string running = RunInPool(s, "big");  // 4,000 MiB left
  const std::string head = RunInPool(s, "big");     // 6,000 does not fit: waits
  EXPECT_EQ(StatusOf(s, head), "PROVISIONING");
  // 3,000 fits the 4,000 left; the head could not use them now, and has not waited long enough to hold them.
  const std::string small = RunInPool(s, "small");
  EXPECT_EQ(StatusOf(s, small), "PENDING");
  // Same shape as the head behind it: does not fit either, and waits its turn behind it.
  const std::string second = RunInPool(s, "big");
  EXPECT_EQ(StatusOf(s, second), "PROVISIONING");
  // Capacity frees: the head first (first come, first served among those that fit), then the next.
  Stop(s, running);  // 10,000 - 3,000 = 7,000 free: the head (6,000) goes, 1,000 left
  EXPECT_EQ(StatusOf(s, head), "PENDING");
  EXPECT_EQ(StatusOf(s, second), "PROVISIONING");
}

TEST_F(CapacityOrderTest, BackfillFromTheLineWhenCapacityFreesTriesEachShapeOnce) {
  EcsServer s(db_);
  SetUpPool(s);
  const std::string a = RegisterInstance(s, {10000}, 8192, 32768, InProvider("pool"));
  RegisterShared(s, "full", 10000);
  RegisterShared(s, "big", 8000);
  RegisterShared(s, "small", 2000);
  const std::string filler = RunInPool(s, "full");
  const std::string small_running = RunInPool(s, "small");  // waits: nothing left
  const std::string head = RunInPool(s, "big");
  const std::string small1 = RunInPool(s, "small"), small2 = RunInPool(s, "small"), small3 = RunInPool(s, "small");
  for (const auto& t : {small_running, head, small1, small2, small3}) EXPECT_EQ(StatusOf(s, t), "PROVISIONING");
  Stop(s, filler);
  // 10,000 free: the line's head is small_running (2,000), then big (8,000): both placed, in order; the smalls
  // behind find nothing left.
  EXPECT_EQ(InstanceOf(s, small_running), a);
  EXPECT_EQ(InstanceOf(s, head), a);
  EXPECT_EQ(StatusOf(s, small1), "PROVISIONING");
  Stop(s, head);  // 8,000 free: head is small1, then small2, small3 fit too
  EXPECT_EQ(StatusOf(s, small1), "PENDING");
  EXPECT_EQ(StatusOf(s, small2), "PENDING");
  EXPECT_EQ(StatusOf(s, small3), "PENDING");
}

TEST_F(CapacityOrderTest, AHeadThatHasWaitedHoldsTheInstanceWhereItFitsSoonest) {
  EcsServer s(db_, 7, true, std::nullopt, [](PlacementPolicy& p) { p.reservation_after_ms = 5 * kMinute; });
  SetUpPool(s);
  const std::string a = RegisterInstance(s, {10000}, 8192, 32768, InProvider("pool"));
  const std::string b = RegisterInstance(s, {10000}, 8192, 32768, InProvider("pool"));
  RegisterShared(s, "big", 6000);
  RegisterShared(s, "small", 3000);
  const std::string on_a = RunInPool(s, "big"), on_b = RunInPool(s, "big");
  ASSERT_EQ(InstanceOf(s, on_a), a);
  ASSERT_EQ(InstanceOf(s, on_b), b);
  const std::string head = RunInPool(s, "big");
  EXPECT_EQ(StatusOf(s, head), "PROVISIONING");
  // Before the reservation, binpack puts a small task on the first of the two equal instances.
  const std::string early = RunInPool(s, "small");
  EXPECT_EQ(InstanceOf(s, early), a);
  Stop(s, early);
  s.now_ += 5 * kMinute;  // the head has waited long enough: a and b both have 4,000 free; ties go to a
  const std::string late = RunInPool(s, "small");
  EXPECT_EQ(InstanceOf(s, late), b) << "a is held for the head";
  const std::string blocked = RunInPool(s, "small");  // b has 1,000 left, a is held: waits
  EXPECT_EQ(StatusOf(s, blocked), "PROVISIONING");
  Stop(s, on_a);  // a is empty: the head goes there, and the small task behind it fits beside it
  EXPECT_EQ(InstanceOf(s, head), a);
  EXPECT_EQ(InstanceOf(s, blocked), a);
}

TEST_F(CapacityOrderTest, AStreamOfSmallTasksCannotStarveTheHeadOnceItHoldsItsReservation) {
  EcsServer s(db_, 7, true, std::nullopt, [](PlacementPolicy& p) { p.reservation_after_ms = 5 * kMinute; });
  SetUpPool(s);
  RegisterInstance(s, {10000}, 8192, 32768, InProvider("pool"));
  RegisterShared(s, "big", 8000);
  RegisterShared(s, "small", 2000);
  std::vector<std::string> running;
  for (int i = 0; i < 5; ++i) running.push_back(RunInPool(s, "small"));  // 5 x 2,000: full
  const std::string head = RunInPool(s, "big");
  // Before the reservation every freed 2,000 goes to the next small task: backfill.
  const std::string backfilled = RunInPool(s, "small");
  EXPECT_EQ(StatusOf(s, backfilled), "PROVISIONING");
  Stop(s, running[0]);
  EXPECT_EQ(StatusOf(s, backfilled), "PENDING");
  running[0] = backfilled;
  // After it, freed memory stays free for the head: small tasks keep arriving and wait.
  s.now_ += 5 * kMinute;
  std::vector<std::string> stream;
  for (size_t i = 0; i + 1 < running.size(); ++i) {
    stream.push_back(RunInPool(s, "small"));
    Stop(s, running[i]);
    EXPECT_EQ(StatusOf(s, stream.back()), "PROVISIONING") << "stop " << i;
    EXPECT_EQ(StatusOf(s, head), i + 1 < 4 ? "PROVISIONING" : "PENDING") << "stop " << i;
  }
  EXPECT_EQ(StatusOf(s, head), "PENDING");  // 4 stops freed 8,000
  for (const auto& t : stream) EXPECT_EQ(StatusOf(s, t), "PROVISIONING");
}

TEST_F(CapacityOrderTest, ATeamQuotaHoldsItsTasksWithoutBlockingOtherTeams) {
  EcsServer s(db_);
  SetUpPool(s, Json::array({Tag(std::string(kQuotaTag) + ":ml", "8000")}));
  RegisterInstance(s, {20000, 20000}, 8192, 32768, InProvider("pool"));
  RegisterShared(s, "job", 3000);
  const Json ml = Json::array({Tag(kTeamTag, "ml")}), web = Json::array({Tag(kTeamTag, "web")});
  const std::string ml1 = RunInPool(s, "job", ml), ml2 = RunInPool(s, "job", ml);  // 6,000 of ml's 8,000
  EXPECT_EQ(StatusOf(s, ml2), "PENDING");
  const std::string ml3 = RunInPool(s, "job", ml);  // 9,000 would pass 8,000: waits though GPUs have room
  EXPECT_EQ(StatusOf(s, ml3), "PROVISIONING");
  const std::string w = RunInPool(s, "job", web);  // another team, no quota: placed though ml3 waits ahead
  EXPECT_EQ(StatusOf(s, w), "PENDING");
  s.Inspect([](const ClusterState& st) {
    EXPECT_EQ(st.UsageOf("pool").Team("ml"), 6000);
    EXPECT_EQ(st.UsageOf("pool").total, 9000);
    EXPECT_NE(QuotaExcess(st, "pool", "ml", 3000).find("team ml's GPU memory quota"), std::string::npos);
    EXPECT_EQ(QuotaExcess(st, "pool", "web", 3000), "");
  });
  Stop(s, w);  // frees web's memory, not ml's: ml3 still waits
  EXPECT_EQ(StatusOf(s, ml3), "PROVISIONING");
  Stop(s, ml1);
  EXPECT_EQ(StatusOf(s, ml3), "PENDING");
}

TEST_F(CapacityOrderTest, AProviderQuotaCapsAllItsTasksAndBadQuotasAreRefused) {
  EcsServer s(db_);
  SetUpPool(s, Json::array({Tag(kQuotaTag, "5000")}));
  RegisterInstance(s, {20000}, 8192, 32768, InProvider("pool"));
  RegisterShared(s, "job", 2000);
  const std::string t1 = RunInPool(s, "job"), t2 = RunInPool(s, "job"), t3 = RunInPool(s, "job");
  EXPECT_EQ(StatusOf(s, t2), "PENDING");
  EXPECT_EQ(StatusOf(s, t3), "PROVISIONING");  // 6,000 > 5,000
  Stop(s, t1);
  EXPECT_EQ(StatusOf(s, t3), "PENDING");
  for (const char* bad : {"-1", "lots", "", "12.5"}) {
    OperationResult r = s.Call("CreateCapacityProvider",
                               {{"name", "other"}, {"tags", Json::array({Tag(std::string(kQuotaTag) + ":x", bad)})}});
    EXPECT_EQ(r.status.code(), ErrorCode::kInvalidParameter) << bad;
  }
}

TEST_F(CapacityOrderTest, QueueLengthAndWaitTimesAreCountedPerProvider) {
  EcsServer s(db_);
  SetUpPool(s);
  RegisterInstance(s, {10000}, 8192, 32768, InProvider("pool"));
  RegisterShared(s, "big", 6000);
  const std::string running = RunInPool(s, "big");
  const std::string w1 = RunInPool(s, "big");
  RunInPool(s, "big");
  EXPECT_EQ((s.counters().waiting[{"default", "pool"}]), 2u);
  s.now_ += 90'000;  // w1 waits 90 s: the 120 s bucket
  Stop(s, running);
  ASSERT_EQ(StatusOf(s, w1), "PENDING");
  const PlacementCounters c = s.counters();
  EXPECT_EQ((c.waiting.at({"default", "pool"})), 1u);
  const WaitHistogram& h = c.waits.at("pool");
  EXPECT_EQ(h.count, 1u);
  EXPECT_DOUBLE_EQ(h.sum_seconds, 90.0);
  EXPECT_EQ(h.buckets[5], 1u);  // (60, 120]
}

}  // namespace
}  // namespace gpupack::api
